"""init() outside any launcher: a size-1 group on which every collective is the identity."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

LAUNCHER_VARS = ("COMMLIB_", "SLURM_", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


def run(code):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=50)


def test_singleton_semantics():
    p = run("""
        import numpy as np, commlib as cl
        g = cl.init()
        assert cl.init() is g and g.rank() == 0 and g.size() == 1 and cl.is_available()
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        assert np.array_equal(cl.all_reduce(x), x) and cl.all_reduce(x, out=x) is x
        assert np.array_equal(cl.all_gather(x), x) and cl.all_gather(np.float64(3)).shape == (1,)
        assert np.array_equal(cl.reduce_scatter(x), x) and np.array_equal(cl.broadcast(x), x)
        assert np.array_equal(cl.reduce(x), x) and np.array_equal(cl.gather(x), x)
        assert np.array_equal(cl.scatter(x), x) and np.array_equal(cl.all_to_all(x), x)
        assert np.array_equal(cl.ppermute(x, [(0, 0)]), x) and not cl.ppermute(x, []).any()
        assert np.array_equal(cl.iall_reduce(x).wait(), x)
        cl.barrier()
        assert cl.iprobe() is None
        cl.send(x, 0, tag=4)
        st = cl.probe(0, 4)
        assert (st.source, st.tag, st.nbytes) == (0, 4, x.nbytes)
        assert np.array_equal(cl.recv_like(x, 0, tag=4), x)
        assert g.split(0).size() == 1 and g.split(-1) is None
        for bad in (lambda: cl.all_reduce(x, op="bxor"), lambda: cl.all_reduce(x, op="nope")):
            try:
                bad()
            except ValueError as e:
                print("ValueError:", e)
        cl.finalize()
        print("ok")
    """)
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    assert "'bxor' is not defined for dtype float32" in p.stdout
    assert "unknown reduction op 'nope'" in p.stdout


def test_strict_init_outside_a_launcher_raises():
    p = run("""
        import commlib as cl
        try:
            cl.init(strict=True)
        except cl.CommError as e:
            print("CommError:", e)
    """)
    assert p.returncode == 0, p.stderr
    assert "no launcher environment found" in p.stdout
