"""Shared start-up for the Ray cases: a local Ray on loopback (127.0.0.2: Ray turns 127.0.0.1 into the
machine's routed address) in TEMP_DIR, every worker set up by commlib.ray.setup_worker."""
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
