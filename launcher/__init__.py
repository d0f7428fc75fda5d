"""commrun: starts and supervises the ranks of a commlib job (installed from launcher/)."""


def __getattr__(name):
    # The installed version, read when asked (`commrun --version`): importlib.metadata and its scan of
    # the installed distributions cost ~10 ms, which every commrun start paid at import.
    if name == "__version__":
        from importlib import metadata
        try:
            version = metadata.version("commlib")
        except metadata.PackageNotFoundError:  # running from a source tree
            version = "0+source"
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
