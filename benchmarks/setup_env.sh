#!/usr/bin/env bash
# Creates the benchmark-only virtualenv benchmarks/.env (gitignored) with the
# anchors commlib is compared against: mpi4py on Debian's Open MPI, torch (CPU
# build) for gloo, mlx[cpu] for the MLX ring, plus numpy and matplotlib; and
# benchmarks/.env-mpich: mpi4py on the MPICH wheel from the package index.
#
#   bash benchmarks/setup_env.sh              # anchors + commlib from this repo
#   bash benchmarks/setup_env.sh --commlib    # the same (kept for old instructions)
#   bash benchmarks/setup_env.sh --commlib-only   # just (re)install commlib
#
# The anchors need commlib too: the sweep's rules live in commlib.bench.
#
# Idempotent: every step checks before it installs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
ENV="$HERE/.env"
PY="${PYTHON:-python3}"

want_anchors=1
want_commlib=1
for arg in "$@"; do
    case "$arg" in
        --commlib) want_commlib=1 ;;
        --commlib-only) want_commlib=1; want_anchors=0 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "unknown option: $arg" >&2; exit 2 ;;
    esac
done

if [ ! -x "$ENV/bin/python" ]; then
    echo "== creating $ENV"
    "$PY" -m venv "$ENV"
fi
PIP=("$ENV/bin/python" -m pip install --disable-pip-version-check)

if [ "$want_anchors" = 1 ]; then
    if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
        echo "== installing Open MPI (Debian)"
        SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
        $SUDO apt-get update
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y openmpi-bin libopenmpi-dev
    fi
    command -v gcc >/dev/null || { echo "gcc is needed for the bare exchange anchor" >&2; exit 1; }

    have() { "$ENV/bin/python" -c "import $1" 2>/dev/null; }

    have numpy && have matplotlib || "${PIP[@]}" numpy matplotlib
    # torch: pinned to the CPU build (a plain `torch` from PyPI drags in CUDA wheels).
    if ! "$ENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__ != '2.13.0+cpu')" 2>/dev/null; then
        "${PIP[@]}" "torch==2.13.0"
    fi
    # mpi4py must be compiled against the system Open MPI (no binary wheel with its own MPI).
    if ! "$ENV/bin/python" -c "from mpi4py import MPI; import sys; sys.exit('Open MPI' not in MPI.Get_library_version())" 2>/dev/null; then
        MPICC="$(command -v mpicc)" "${PIP[@]}" --no-binary mpi4py --no-cache-dir mpi4py
    fi
    have mlx.core || "${PIP[@]}" "mlx[cpu]"
    # the MPICH wheel (shared memory within a host) needs an mpi4py of its own: a second venv
    MPICH_ENV="$HERE/.env-mpich"
    if ! "$MPICH_ENV/bin/python" -c "from mpi4py import MPI; import sys; sys.exit('MPICH' not in MPI.Get_library_version())" 2>/dev/null; then
        echo "== creating $MPICH_ENV (mpi4py + the MPICH wheel)"
        "$PY" -m venv "$MPICH_ENV"
        "$MPICH_ENV/bin/python" -m pip install --disable-pip-version-check numpy mpi4py mpich
    fi
fi

if [ "$want_commlib" = 1 ]; then
    echo "== installing commlib from $REPO"
    # pip rebuilds and reinstalls a local directory every time (picks up new commits)
    "${PIP[@]}" "$REPO"
    (cd / && "$ENV/bin/python" -c "import commlib; print('commlib', commlib.__file__)")
fi

echo "== versions"
cd /   # so that `import commlib` finds the installed copy, not the source tree
"$ENV/bin/python" - <<'PY'
import importlib
for m in ("numpy", "matplotlib", "torch", "mpi4py", "mlx.core", "commlib"):
    try:
        mod = importlib.import_module(m)
        print(f"  {m:12s} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"  {m:12s} not available ({type(e).__name__})")
PY
command -v mpirun >/dev/null && mpirun --version | head -1 || true
