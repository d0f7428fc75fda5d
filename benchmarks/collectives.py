"""Run commlib's collective sweep and the same sweep for its anchors, and compare.

    benchmarks/.env/bin/python benchmarks/collectives.py --n 2 4 --repeats 3
    benchmarks/.env/bin/python benchmarks/collectives.py --n 2 --impls commlib,gloo --sizes 8 1M 16M --ops all_reduce

Implementations (``--impls``, comma list):
  commlib   commrun -n N -m commlib.bench (the commlib installed in benchmarks/.env)
  mpi-tcp   mpi4py + Open MPI, ob1 over the TCP btl on loopback
  mpi-shm   mpi4py + Open MPI, ob1 over the shared-memory btl (vader)
  commlib-socket  commlib with COMMLIB_TRANSPORT=socket (Unix sockets instead of shared memory)
  mpich     mpi4py + the MPICH wheel from the package index (benchmarks/.env-mpich), its default
            shared memory, under the wheel's own mpiexec
  gloo      torch.distributed, backend gloo, pairs on loopback
  mlx       mlx.core.distributed, ring backend on loopback (no reduce_scatter/broadcast)
  bare      two processes exchanging the message full duplex over a Unix socketpair (C):
            the ceiling of a 2-rank ring all_reduce

For each repeat, each n and each implementation (the order rotates between
repeats to spread machine noise) the sweep runs in fresh processes under a
timeout; a crash or timeout is reported and the rest goes on. Each point's
reported time is the median over repeats of the sweep's own statistic (the
median over iterations of the slowest rank). Printed: nccl-tests-style tables,
commlib / anchor ratios, and the targets of issue 4 item 7 with PASS/MISS.
Written: benchmarks/results/<stamp>.json (every record, medians, meta),
benchmarks/results/<stamp>.txt (what was printed) and benchmarks/busbw_n{N}.png.
All traffic stays on 127.0.0.1 and Unix sockets.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ENV = os.path.join(HERE, ".env")
ENV_PY = os.path.join(ENV, "bin", "python")
ANCHORS = os.path.join(HERE, "anchors")
RESULTS = os.path.join(HERE, "results")

ENV_MPICH = os.path.join(HERE, ".env-mpich")  # mpi4py + the MPICH wheel (pip install mpi4py mpich)
ALL_IMPLS = ("commlib", "commlib-socket", "mpich", "mpi-tcp", "mpi-shm", "gloo", "mlx", "bare")
sys.path.insert(0, ANCHORS)
import _sweep  # noqa: E402  (sizes and busbw factors shared with the anchors)
from _sweep import OPS, MiB  # noqa: E402


# --------------------------------------------------------------------------- running

def free_ports(k: int) -> list[int]:
    """k distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(k):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def rank_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # one compute thread per rank: the machine has 2 cores and n=4 already oversubscribes
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.pop("PYTHONPATH", None)
    if extra:
        env.update(extra)
    return env


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_procs(cmds: list[list[str]], envs: list[dict], timeout: float, workdir: str) -> tuple[int, str, str]:
    """Start one process per command (each in its own session); return (rc, stdout of #0, stderr tail).

    If any process fails, the others are killed; all are killed at the timeout.
    rc is 0 when all exit 0, the first non-zero code otherwise, -999 on timeout."""
    outs, errs, procs = [], [], []
    try:
        for i, (cmd, env) in enumerate(zip(cmds, envs)):
            o = open(os.path.join(workdir, f"out{i}"), "w+b")
            e = open(os.path.join(workdir, f"err{i}"), "w+b")
            outs.append(o)
            errs.append(e)
            procs.append(subprocess.Popen(cmd, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=env,
                                          cwd=workdir, start_new_session=True))
        deadline = time.monotonic() + timeout
        rc = 0
        while True:
            codes = [p.poll() for p in procs]
            bad = [c for c in codes if c not in (None, 0)]
            if bad:
                rc = bad[0]
                time.sleep(2.0)  # let the others report their own error first
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                rc = -999
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_group(p)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    texts = []
    for f in outs + errs:
        f.flush()
        f.seek(0)
        texts.append(f.read().decode("utf-8", "replace"))
        f.close()
    stdout0 = texts[0] if texts else ""
    err_tail = "\n".join(t[-1500:] for t in texts[len(outs):] if t.strip())
    return rc, stdout0, err_tail


def parse_records(text: str) -> list[dict]:
    recs = []
    for line in text.splitlines():
        i = line.find("{")
        if i < 0:
            continue
        try:
            rec = json.loads(line[i:])
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "impl" in rec and "op" in rec:
            recs.append(rec)
    return recs


def sweep_args(args) -> list[str]:
    a = ["--ops", *args.ops, "--budget", str(args.budget), "--min-iters", str(args.min_iters),
         "--max-iters", str(args.max_iters)]
    a += ["--sizes", *map(str, args.sizes)] if args.sizes else ["--max-mib", str(args.max_mib)]
    return a


def mpirun_base(n: int) -> list[str]:
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(n),
            "--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1"]


def commands_for(impl: str, n: int, args, workdir: str, bare_bin: str | None):
    """(commands, envs) to run one sweep of impl at n ranks."""
    py = ENV_PY if os.path.exists(ENV_PY) else sys.executable
    sa = sweep_args(args)
    if impl in ("commlib", "commlib-socket"):
        commrun = os.path.join(ENV, "bin", "commrun")
        launcher = [commrun] if os.path.exists(commrun) else [py, "-m", "commrun"]
        env = rank_env({"COMMLIB_TRANSPORT": "socket" if impl == "commlib-socket" else "auto"})
        return [launcher + ["-n", str(n), "--no-tag-output", "-m", "commlib.bench", "--impl", impl, *sa]], [env]
    if impl == "mpich":
        mpiexec, mpy = os.path.join(ENV_MPICH, "bin", "mpiexec"), os.path.join(ENV_MPICH, "bin", "python")
        return [[mpiexec, "-n", str(n), mpy, os.path.join(ANCHORS, "mpi_sweep.py"), "--impl", impl, *sa]], [rank_env()]
    if impl in ("mpi-tcp", "mpi-shm"):
        btl = (["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"] if impl == "mpi-tcp"
               else ["--mca", "btl", "self,vader"])
        env = rank_env({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
        return [mpirun_base(n) + btl + [py, os.path.join(ANCHORS, "mpi_sweep.py"), "--impl", impl, *sa]], [env]
    if impl == "gloo":
        port = free_ports(1)[0]
        cmd = [py, os.path.join(ANCHORS, "gloo_sweep.py"), "--timeout", str(int(args.timeout)), *sa]
        envs = [rank_env({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}) for r in range(n)]
        return [cmd] * n, envs
    if impl == "mlx":
        hostfile = os.path.join(workdir, "mlx_hosts.json")
        with open(hostfile, "w") as f:
            json.dump([[f"127.0.0.1:{p}"] for p in free_ports(n)], f)
        cmd = [py, os.path.join(ANCHORS, "mlx_sweep.py"), *sa]
        envs = [rank_env({"MLX_RANK": str(r), "MLX_HOSTFILE": hostfile}) for r in range(n)]
        return [cmd] * n, envs
    raise ValueError(impl)


def bare_sizes(args) -> list[int]:
    sizes = [s for s in (args.sizes or _sweep.default_sizes(args.max_mib)) if s >= MiB]
    return sorted(set(sizes + [64 * MiB]))


def run_bare(bare_bin: str, args, timeout: float) -> tuple[int, list[dict], str]:
    recs, errs, rc = [], [], 0
    for size in bare_sizes(args):
        reps = 15 if size <= 64 * MiB else 5
        try:
            p = subprocess.run([bare_bin, "--size", str(size), "--repeats", str(reps)], capture_output=True,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            rc, errs = -999, errs + [f"bare exchange {size} B timed out"]
            continue
        recs += parse_records(p.stdout)
        if p.returncode:
            rc = p.returncode
            errs.append(p.stderr[-500:])
    return rc, recs, "\n".join(errs)


def compile_bare(log) -> str | None:
    src = os.path.join(ANCHORS, "bare_exchange.c")
    out_dir = os.path.join(ENV, "bin") if os.path.isdir(os.path.join(ENV, "bin")) else tempfile.mkdtemp()
    out = os.path.join(out_dir, "bare_exchange")
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        log("bare: no C compiler found; skipped")
        return None
    p = subprocess.run([cc, "-O2", "-o", out, src], capture_output=True, text=True, timeout=120)
    if p.returncode:
        log(f"bare: compiling {src} failed:\n{p.stderr[-1000:]}")
        return None
    return out


# --------------------------------------------------------------------------- aggregation

def aggregate(records: list[dict]) -> dict:
    """(impl, op, n, nbytes) -> median record over repeats (us = median; bandwidths from it)."""
    groups: dict = {}
    for r in records:
        if "us" not in r:
            continue
        groups.setdefault((r["impl"], r["op"], r["n"], r["nbytes"]), []).append(r)
    med = {}
    for key, rs in groups.items():
        impl, op, n, nbytes = key
        us = statistics.median(r["us"] for r in rs)
        algbw = nbytes / (us * 1e-6) / 1e9
        factor = 1.0 if op == "exchange" else _sweep.busbw_factor(op, n)
        med[key] = {"impl": impl, "op": op, "n": n, "nbytes": nbytes, "us": us, "algbw": algbw,
                    "busbw": algbw * factor, "repeats": len(rs),
                    "us_lo": min(r["us"] for r in rs), "us_hi": max(r["us"] for r in rs),
                    "check_failed": any("check_failed" in r for r in rs)}
    return med


def fmt_size(b: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def fmt_bw(x: float) -> str:
    return f"{x:8.3f}" if x >= 0.001 else f"{x:8.2e}"


def print_tables(med: dict, ns, impls, ops, out) -> None:
    for n in ns:
        for op in ops:
            for impl in impls:
                rows = sorted((k[3], v) for k, v in med.items() if k[:3] == (impl, op, n))
                if not rows:
                    continue
                out(f"\n# {op}  n={n}  {impl}   (float32; median over repeats; GB/s = 1e9 B/s)")
                out(f"# {'size':>10} {'count':>10} {'time(us)':>12} {'algbw':>8} {'busbw':>8} "
                    f"{'repeats':>7} {'spread':>8}")
                for nbytes, v in rows:
                    spread = (v["us_hi"] - v["us_lo"]) / v["us"] * 100 if v["us"] else 0.0
                    flag = "  WRONG RESULT" if v["check_failed"] else ""
                    out(f"  {fmt_size(nbytes):>10} {nbytes // 4:>10} {v['us']:>12.1f} {fmt_bw(v['algbw'])} "
                        f"{fmt_bw(v['busbw'])} {v['repeats']:>7} {spread:>7.0f}%{flag}")


def print_ratios(med: dict, ns, impls, ops, out) -> None:
    anchors = [i for i in impls if i not in ("commlib", "bare")]
    if "commlib" not in impls or not anchors:
        return
    for n in ns:
        for op in ops:
            sizes = sorted({k[3] for k in med if k[1] == op and k[2] == n and k[0] == "commlib"})
            if not sizes:
                continue
            out(f"\n# commlib / anchor, busbw (>1: commlib faster)   {op}  n={n}")
            out("# " + f"{'size':>10}" + "".join(f" {a:>9}" for a in anchors))
            for s in sizes:
                c = med[("commlib", op, n, s)]
                cells = []
                for a in anchors:
                    v = med.get((a, op, n, s))
                    cells.append(f" {c['busbw'] / v['busbw']:>9.2f}" if v and v["busbw"] > 0 else f" {'-':>9}")
                out("  " + f"{fmt_size(s):>10}" + "".join(cells))
            s = min(sizes)
            c = med[("commlib", op, n, s)]
            cells = []
            for a in anchors:
                v = med.get((a, op, n, s))
                cells.append(f" {c['us'] / v['us']:>9.2f}" if v else f" {'-':>9}")
            out(f"  latency at {fmt_size(s)}, commlib time / anchor time (<1: commlib faster):")
            out("  " + f"{'':>10}" + "".join(cells))


def print_summary(med: dict, ns, impls, ops, out) -> None:
    """One compact table per (op, n): busbw of every impl by size, time in us at the smallest size."""
    for n in ns:
        for op in ops:
            present = [i for i in impls if any(k[:3] == (i, op, n) for k in med)]
            if not present:
                continue
            sizes = sorted({k[3] for k in med if k[1] == op and k[2] == n and k[0] in present})
            out(f"\n# summary {op} n={n}: busbw GB/s (first row: time in us)")
            out("# " + f"{'size':>10}" + "".join(f" {i:>9}" for i in present))
            for j, s in enumerate(sizes):
                cells = []
                for i in present:
                    v = med.get((i, op, n, s))
                    if v is None:
                        cells.append(f" {'-':>9}")
                    elif j == 0:
                        cells.append(f" {v['us']:>7.1f}us")
                    else:
                        cells.append(f" {v['busbw']:>9.3f}")
                out("  " + f"{fmt_size(s):>10}" + "".join(cells))


def target_checks(med: dict, ns, out) -> list[dict]:
    """Issue 4 item 7's targets; every one printed as PASS, MISS or n/a."""
    checks = []

    def add(name, ok, detail):
        checks.append({"target": name, "result": ok, "detail": detail})
        out(f"  {ok:4s}  {name:58s} {detail}")

    out("\n# targets (issue 4 item 7; ratios of medians of repeats in this run)")
    for n in ns:
        for mib in (1, 16, 64):
            nb = mib * MiB
            c = med.get(("commlib", "all_reduce", n, nb))
            for anchor, need in (("gloo", 1.25), ("mlx", 1.0), ("mpi-tcp", 1.0)):
                a = med.get((anchor, "all_reduce", n, nb))
                name = f"n={n} all_reduce {mib} MiB busbw >= {need:g} x {anchor}"
                if not c or not a:
                    add(name, "n/a", f"missing {'commlib' if not c else anchor}")
                    continue
                r = c["busbw"] / a["busbw"]
                add(name, "PASS" if r >= need else "MISS",
                    f"{r:.2f}x  ({c['busbw']:.3f} vs {a['busbw']:.3f} GB/s)")
        c = med.get(("commlib", "all_reduce", n, 8))
        for anchor, need in (("mpi-tcp", 1.0), ("gloo", 0.5)):
            a = med.get((anchor, "all_reduce", n, 8))
            name = f"n={n} all_reduce 8 B latency <= {need:g} x {anchor}"
            if not c or not a:
                add(name, "n/a", f"missing {'commlib' if not c else anchor}")
                continue
            r = c["us"] / a["us"]
            add(name, "PASS" if r <= need else "MISS", f"{r:.2f}x  ({c['us']:.1f} vs {a['us']:.1f} us)")
    if 2 in ns:
        c = med.get(("commlib", "all_reduce", 2, 64 * MiB))
        b = med.get(("bare", "exchange", 2, 64 * MiB))
        name = "n=2 all_reduce 64 MiB time <= 1.25 x bare exchange"
        if not c or not b:
            add(name, "n/a", f"missing {'commlib' if not c else 'bare'}")
        else:
            r = c["us"] / b["us"]
            add(name, "PASS" if r <= 1.25 else "MISS", f"{r:.2f}x  ({c['us'] / 1e3:.1f} vs {b['us'] / 1e3:.1f} ms)")
    return checks


def plot(med: dict, ns, impls, ops, out) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        out("plot: matplotlib is not installed; no PNG")
        return []
    styles = {"commlib": ("black", "o", 2.2), "commlib-socket": ("dimgray", "o", 1.2),
              "mpich": ("tab:purple", "P", 1.2), "mpi-tcp": ("tab:blue", "s", 1.2), "mpi-shm": ("tab:cyan", "^", 1.2),
              "gloo": ("tab:red", "v", 1.2), "mlx": ("tab:green", "D", 1.2), "bare": ("tab:gray", "x", 1.0)}
    written = []
    for n in ns:
        shown = [op for op in ops if any(k[1] == op and k[2] == n for k in med)]
        if not shown:
            continue
        cols = min(3, len(shown))
        rows = -(-len(shown) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False)
        for ax, op in zip(axes.flat, shown):
            for impl in impls:
                pts = sorted((k[3], v["busbw"]) for k, v in med.items() if k[:3] == (impl, op, n) and v["busbw"] > 0)
                if pts:
                    color, marker, lw = styles.get(impl, ("tab:purple", ".", 1.0))
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, lw=lw,
                            ms=4, label=impl)
            if op == "all_reduce" and n == 2:
                pts = sorted((k[3], v["busbw"]) for k, v in med.items() if k[:3] == ("bare", "exchange", 2))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="--", marker="x", color="tab:gray",
                            label="bare exchange (ceiling)")
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=32))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
                lambda x, _: fmt_size(int(round(x))).replace(" ", "").replace("iB", "") if x >= 1 else ""))
            ax.set_yscale("log")
            ax.set_title(f"{op}  n={n}")
            ax.set_xlabel("message size")
            ax.set_ylabel("busbw (GB/s)" if op != "pingpong" else "one-way bandwidth (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(shown):]:
            ax.axis("off")
        fig.suptitle(f"float32 collectives on one host, {n} ranks (median of repeats)")
        fig.tight_layout()
        path = os.path.join(HERE, f"busbw_n{n}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# --------------------------------------------------------------------------- main

def versions() -> dict:
    v = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    for mod in ("numpy", "torch", "mpi4py", "mlx.core", "commlib"):
        try:
            m = __import__(mod, fromlist=["_"])
            v[mod] = getattr(m, "__version__", "?")
        except Exception:  # noqa: BLE001
            v[mod] = None
    try:
        v["mpirun"] = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                                     timeout=30).stdout.splitlines()[0]
    except Exception:  # noqa: BLE001
        v["mpirun"] = None
    return v


def print_report(records, runs, ns, impls, args, out):
    med = aggregate(records)
    for r in records:
        if "skipped" in r and r.get("repeat") == 0:
            out(f"# skipped: {r['impl']} {r['op']} n={r['n']}: {r['skipped']}")
    print_tables(med, ns, impls, list(args.ops) + ["exchange"], out)
    print_summary(med, ns, impls, list(args.ops) + ["exchange"], out)
    print_ratios(med, ns, impls, args.ops, out)
    checks = target_checks(med, ns, out)
    failed = [r for r in runs if r["rc"] != 0]
    if failed:
        out("\n# runs that failed or timed out (their points are missing above):")
        for r in failed:
            out(f"#   {r['impl']} n={r['n']} repeat {r['repeat'] + 1}: rc={r['rc']}")
    return med, checks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--n", nargs="+", type=int, default=[2, 4], help="group sizes (default 2 4)")
    p.add_argument("--repeats", type=int, default=3, help="sweeps per impl and n (default 3)")
    p.add_argument("--impls", default=",".join(ALL_IMPLS), help=f"comma list from {','.join(ALL_IMPLS)}")
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--sizes", nargs="+", type=_sweep.parse_size, default=None,
                   help="sizes in bytes (K/M/G suffixes); default 8 B and 16 B..--max-mib x4")
    p.add_argument("--max-mib", type=float, default=256)
    p.add_argument("--budget", type=float, default=0.3, help="seconds of timed iterations per point")
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--timeout", type=float, default=480, help="seconds for one sweep (one impl, one n)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--tag", default="", help="added to the result file names")
    p.add_argument("--from-json", metavar="PATH",
                   help="run nothing: print the report (and plots, unless --no-plot) of a saved results JSON")
    args = p.parse_args()

    if os.path.exists(ENV_PY) and os.path.realpath(sys.prefix) != os.path.realpath(ENV):
        # the anchors and matplotlib live in the benchmark venv
        os.execv(ENV_PY, [ENV_PY, os.path.abspath(__file__), *sys.argv[1:]])

    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    unknown = [i for i in impls if i not in ALL_IMPLS]
    if unknown:
        p.error(f"unknown impl(s): {', '.join(unknown)}")
    if args.sizes:
        args.sizes = sorted(set(args.sizes))
    ns = sorted(set(args.n))
    os.makedirs(RESULTS, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + (f"-{args.tag}" if args.tag else "")
    report = io.StringIO()

    def out(line=""):
        print(line, flush=True)
        report.write(line + "\n")

    def log(line):
        print(line, file=sys.stderr, flush=True)
        report.write("# " + line + "\n")

    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        records, runs = saved["records"], saved["runs"]
        ns = sorted({r["n"] for r in records if r.get("op") != "exchange"})
        seen = {r["impl"] for r in records}
        impls = [i for i in ALL_IMPLS if i in seen]
        args.ops = [o for o in OPS if any(r["op"] == o for r in records)]
        print_report(records, runs, ns, impls, args, out)
        if not args.no_plot:
            for x in plot(aggregate(records), ns, impls, args.ops, out):
                out(f"wrote {os.path.relpath(x, REPO)}")
        return 0

    bare_bin = compile_bare(log) if "bare" in impls else None
    runs, records = [], []
    t_start = time.monotonic()
    for rep in range(args.repeats):
        order = impls[rep % len(impls):] + impls[:rep % len(impls)]
        for n in ns:
            for impl in order:
                if impl == "bare" and (n != ns[0] or bare_bin is None):
                    continue  # the exchange is always 2 processes: once per repeat
                t0 = time.monotonic()
                with tempfile.TemporaryDirectory(prefix=f"bench-{impl}-") as wd:
                    if impl == "bare":
                        rc, recs, err = run_bare(bare_bin, args, args.timeout)
                    else:
                        cmds, envs = commands_for(impl, n, args, wd, bare_bin)
                        rc, text, err = run_procs(cmds, envs, args.timeout, wd)
                        recs = parse_records(text)
                dt = time.monotonic() - t0
                for r in recs:
                    r["repeat"] = rep
                records += recs
                got = sum("us" in r for r in recs)
                status = "ok" if rc == 0 else ("TIMEOUT" if rc == -999 else f"FAILED rc={rc}")
                load = os.getloadavg()[0]
                log(f"[repeat {rep + 1}/{args.repeats}] {impl:8s} n={n}: {status}, {got} points, {dt:.0f} s"
                    f" (load average {load:.1f} on {os.cpu_count()} cpus)")
                if rc != 0 and err:
                    log("    " + err.strip().replace("\n", "\n    ")[-1200:])
                runs.append({"impl": impl, "n": n if impl != "bare" else 2, "repeat": rep, "rc": rc,
                             "seconds": round(dt, 1), "points": got, "loadavg1": load,
                             "stderr_tail": err[-2000:] if rc else ""})
    log(f"total {time.monotonic() - t_start:.0f} s")

    med, checks = print_report(records, runs, ns, impls, args, out)
    pngs = [] if args.no_plot else plot(med, ns, impls, args.ops, out)
    json_path = os.path.join(RESULTS, f"{stamp}.json")
    with open(json_path, "w") as f:
        json.dump({"meta": {"argv": sys.argv, "stamp": stamp, "host": platform.node(), "versions": versions(),
                            "loadavg_end": os.getloadavg(),
                            "statistic": "per point: median over repeats of (median over iterations of the "
                                         "slowest rank's time); ping-pong: rank 0's round trip / 2"},
                   "runs": runs, "records": records,
                   "medians": [v for _, v in sorted(med.items())], "targets": checks}, f, indent=1)
    with open(os.path.join(RESULTS, f"{stamp}.txt"), "w") as f:
        f.write(report.getvalue())
    out(f"\nwrote {os.path.relpath(json_path, REPO)}, results/{stamp}.txt"
        + "".join(f", {os.path.relpath(x, REPO)}" for x in pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
