"""python -m commrun"""
from .cli import main

main(prog_name="commrun")
