"""Which socket family carries this rank's data connections? Prints `tcp=N unix=M`."""
import os
import sys

import numpy as np
import psutil

import commlib as cl

g = cl.init()
cl.all_reduce(np.ones(1 << 16, np.float32))  # ring: connects to both neighbours
cl.barrier()
coord_port = int(os.environ["COMMLIB_COORDINATOR"].rsplit(":", 1)[1])
me = psutil.Process()
tcp = [c for c in me.net_connections(kind="tcp")
       if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port != coord_port]
unix = [c for c in me.net_connections(kind="unix") if c.status == psutil.CONN_NONE or c.raddr or c.laddr]
print(f"rank {g.rank()}: tcp={len(tcp)} unix={len(unix)}")
print(f"rank {g.rank()}: 1 checks ok")
sys.stdout.flush()
