"""MPI.Spawn onto other hosts: the parents spawn children with info `host` (argv[1]) and `wdir`;
every child reports its network namespace and working directory to parent 0, and both sides
exchange an allreduce over the intercommunicator. Prints `parent R: ...` / `child R: ...` lines
the test checks.

usage: spawn_hosts.py HOSTS [WDIR]     (a child runs it with no arguments)
"""
import os
import sys

from commlib import MPI

parent = MPI.Comm.Get_parent()
if parent == MPI.COMM_NULL:
    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    info = MPI.Info.Create({"host": sys.argv[1]})
    if len(sys.argv) > 2:
        info.Set("wdir", sys.argv[2])
    inter = comm.Spawn(sys.executable, [os.path.abspath(__file__)], maxprocs=2, info=info, root=0)
    got = inter.gather(None, root=MPI.ROOT if me == 0 else MPI.PROC_NULL)
    total = inter.allreduce(me + 1)  # each side receives the sum of the other side's values
    if me == 0:
        for rank, ns, cwd in got:
            print(f"parent 0: child {rank} in {ns} at {cwd}")
    print(f"parent {me}: children's sum {total}, remote size {inter.Get_remote_size()}")
    inter.Disconnect()
else:
    world = MPI.COMM_WORLD
    me = world.Get_rank()
    parent.gather((me, os.readlink("/proc/self/ns/net"), os.getcwd()), root=0)
    total = parent.allreduce(100 * (me + 1))
    print(f"child {me}: parents' sum {total}, world sum {world.allreduce(me)}")
    parent.Disconnect()
