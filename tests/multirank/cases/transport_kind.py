"""Which socket family carries this rank's data connections, and how many carry shared memory?
Prints `tcp=N unix=M shm=K`."""
import os
import sys

import numpy as np
import psutil

import commlib as cl
from commlib._transport import shm

g = cl.init()
cl.all_reduce(np.ones(1 << 16, np.float32))  # ring: connects to both neighbours
cl.barrier()
coord_port = int(os.environ["COMMLIB_COORDINATOR"].rsplit(":", 1)[1])
me = psutil.Process()
tcp = [c for c in me.net_connections(kind="tcp")
       if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port != coord_port]
unix = [c for c in me.net_connections(kind="unix") if c.status == psutil.CONN_NONE or c.raddr or c.laddr]
ep = g.transport.ep
linked = sum(shm.linked(s) for s in list(ep._out.values()) + list(ep._in.values()))
print(f"rank {g.rank()}: tcp={len(tcp)} unix={len(unix)} shm={linked}")
print(f"rank {g.rank()}: 1 checks ok")
sys.stdout.flush()
