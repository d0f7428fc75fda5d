"""Shared test set-up: tests import the source tree (commlib from the repo, commrun from launcher/)."""
import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# launcher/ is installed as the package `commrun`; give the source tree that name too.
if "commrun" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "commrun", REPO / "launcher" / "__init__.py", submodule_search_locations=[str(REPO / "launcher")]
    )
    sys.modules["commrun"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["commrun"])
