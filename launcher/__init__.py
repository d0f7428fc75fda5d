"""commrun: starts and supervises the ranks of a commlib job (installed from launcher/)."""
from importlib import metadata

try:
    __version__ = metadata.version("commlib")
except metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+source"
