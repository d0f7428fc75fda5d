"""A rank program for test_batch_harness.py, run alone or whole as a batched check (_batch.script):
one check that fails on rank 1, then finish()."""
from _mpicase import MPI, Checker

c = Checker()
c.ok(MPI.COMM_WORLD.Get_rank() != 1, "program label", "planted on rank 1 of a program")
c.finish()
