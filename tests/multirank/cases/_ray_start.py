"""Shared start-up for the Ray cases: a local Ray on loopback (127.0.0.2: Ray turns 127.0.0.1 into the
machine's routed address) in TEMP_DIR, every worker set up by commlib.ray.setup_worker; the arguments of
a case run once (`N TEMP_DIR`: args) or of a driver that runs several specs in one Ray (`TEMP_DIR SPEC...`:
specs, its lines tagged `[SPEC] `)."""
import os
import sys

import ray


def start(cpus, temp_dir):
    ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.2", _temp_dir=temp_dir,
             log_to_driver=True, configure_logging=False,
             runtime_env={"worker_process_setup_hook": "commlib.ray.setup_worker",
                          "env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                                       "COMMLIB_TIMEOUT": os.environ.get("COMMLIB_TIMEOUT", "60")}})


def args():
    """(n, temp_dir) from argv."""
    return int(sys.argv[1]), sys.argv[2]


def specs():
    """(temp_dir, [(spec, n, what)]) from argv `TEMP_DIR SPEC...`, each SPEC `N` or `N:WHAT` (what: "" for a
    bare N)."""
    if len(sys.argv) < 3:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} TEMP_DIR SPEC [SPEC...]   (SPEC: N or N:WHAT)")
    out = []
    for spec in sys.argv[2:]:
        n, _, what = spec.partition(":")
        out.append((spec, int(n), what))
    return sys.argv[1], out


def tagged(tag, text):
    """`text` with every line prefixed `[TAG] `: the lines of one spec of a driver that runs several."""
    return "\n".join(f"[{tag}] {line}" for line in text.rstrip("\n").splitlines())
