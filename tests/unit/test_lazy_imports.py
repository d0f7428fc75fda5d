"""commrun starts without NumPy, the kernels or the step loop: commlib's public names and the
transport's channels load on first use, so the launcher (and the coordinator's process, and a host
agent) pays only for the host and rendezvous modules it uses; a program's first public name loads
every layer, as a plain import did."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.timeout(90)
def test_the_launcher_imports_no_numpy():
    out = _run("import sys\n"
               "import commrun.cli, commrun.supervise, commrun.spawn, commrun.agent, commrun.hostagents\n"
               "import commlib._rendezvous, commlib._transport.seal, commlib._transport.limits\n"
               "print(sorted(m for m in ('numpy', 'commlib._kernels', 'commlib._transport._io', 'commlib._api')"
               " if m in sys.modules))")
    assert out.strip() == "[]", out


@pytest.mark.timeout(90)
def test_commrun_reads_its_version_only_when_asked():
    """importlib.metadata and its scan of the installed distributions (~10 ms) only for --version."""
    out = _run("import sys\n"
               "import commrun, commrun.cli\n"
               "print('importlib.metadata' in sys.modules)\n"
               "v = commrun.__version__\n"
               "print('importlib.metadata' in sys.modules, bool(v), commrun.__version__ is v)\n"
               "try:\n"
               "    commrun.no_such_name\n"
               "except AttributeError as e:\n"
               "    print(e)\n")
    assert out.splitlines() == ["False", "True True True", "module 'commrun' has no attribute 'no_such_name'"], out


@pytest.mark.timeout(90)
def test_the_first_public_name_loads_every_layer():
    out = _run("import sys, commlib\n"
               "assert 'numpy' not in sys.modules\n"
               "init = commlib.init\n"
               "print('commlib._api' in sys.modules, 'commlib._transport._io' in sys.modules)\n"
               "ns = {}\n"
               "exec('from commlib import *', ns)\n"
               "print(sorted(set(commlib.__all__) - set(ns)), 'all_reduce' in dir(commlib), commlib.PeerLost.__name__)\n"
               "from commlib import MPI\n"
               "print(MPI.COMM_WORLD.Get_size())\n"
               "try:\n"
               "    commlib.no_such_name\n"
               "except AttributeError as e:\n"
               "    print(e)\n")
    assert out.splitlines() == ["True True", "[] True PeerLost", "1",
                                "module 'commlib' has no attribute 'no_such_name'"], out


@pytest.mark.timeout(90)
def test_the_transport_names_load_on_first_use():
    out = _run("import sys\n"
               "from commlib._transport import seal\n"
               "assert 'commlib._transport._io' not in sys.modules\n"
               "from commlib._transport import Transport, CH_P2P, Endpoint, spin_policy, routed_address\n"
               "import commlib._transport as t\n"
               "print(Transport.__module__, CH_P2P == t.CH_P2P, 'spin_seconds' in dir(t))\n"
               "try:\n"
               "    t.Nothing\n"
               "except AttributeError as e:\n"
               "    print(e)\n")
    assert out.splitlines() == ["commlib._transport.channels True True",
                                "module 'commlib._transport' has no attribute 'Nothing'"], out
