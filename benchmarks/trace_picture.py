"""The pictures of docs/observability.md: a four-rank job with one slow rank, traced and counted.

usage: python benchmarks/trace_picture.py [--out-dir docs]

Runs `commrun -n 4 --trace --stats` on a small training-like loop in which rank 2 computes 3x
longer than the others before each all_reduce, then draws the merged trace (the file Perfetto
opens) as a PNG timeline: a row per rank, a bar per call, each all_reduce's wait (from the rank's
arrival to the last arrival) hatched, and a line from the last arrival to each waiting rank; the
--stats table is written beside it. Needs matplotlib (benchmarks/setup_env.sh installs it).
Writes OUT_DIR/trace_timeline.png, OUT_DIR/trace_stats.txt and OUT_DIR/trace_example.json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

PROGRAM = textwrap.dedent("""
    import time
    import numpy as np
    import commlib as cl
    g = cl.init()
    r = g.rank()
    grads = np.ones(1 << 16, np.float32)      # 256 KiB of "gradients"
    for step in range(6):
        t = time.perf_counter()
        while time.perf_counter() - t < (0.006 if r == 2 else 0.002):  # rank 2 computes 3x longer
            pass
        cl.all_sum(grads)
        cl.all_max(np.array([step], np.int64))  # a small one: the loss's check
    cl.barrier()
""")


def draw(trace_path, png_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ev = json.load(open(trace_path))["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X"]
    ranks = sorted({e["pid"] for e in slices})
    colors = {"all_sum": "#4878d0", "all_max": "#ee854a", "barrier": "#6acc64"}
    fig, ax = plt.subplots(figsize=(11, 3.6), dpi=120)
    for e in slices:
        y = ranks.index(e["pid"])
        start, dur = e["ts"] / 1000, e["dur"] / 1000  # ms
        wait = min(e["args"].get("wait_us", 0) / 1000, dur)
        c = colors.get(e["name"], "#999999")
        if wait > 0:
            ax.barh(y, wait, left=start, height=0.6, color="white", edgecolor=c, hatch="////", linewidth=0.6)
        ax.barh(y, dur - wait, left=start + wait, height=0.6, color=c)
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    for f in (e for e in ev if e["ph"] == "f"):
        s = starts.get(f["id"])
        if s is not None:
            ax.annotate("", xy=(f["ts"] / 1000, ranks.index(f["pid"])), xytext=(s["ts"] / 1000, ranks.index(s["pid"])),
                        arrowprops={"arrowstyle": "->", "color": "#c44e52", "lw": 0.7, "alpha": 0.7})
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first call")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="#4878d0", hatch="////"))
    ax.legend(handles, list(colors) + ["waiting for the last rank"], loc="upper center", ncol=4,
              bbox_to_anchor=(0.5, -0.28), frameon=False, fontsize=8)
    ax.set_title("commrun -n 4 --trace: rank 2 computes 3x longer; arrows run from the last arrival", fontsize=9)
    fig.tight_layout()
    fig.savefig(png_path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
    args = p.parse_args()
    out = os.path.abspath(args.out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "slow_rank.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        trace = os.path.join(out, "trace_example.json")
        r = subprocess.run([sys.executable, "-m", "commrun", "-n", "4", "--trace", trace, "--stats", prog],
                           capture_output=True, text=True, timeout=120, cwd=tmp)
        if r.returncode != 0:
            sys.exit(f"the traced job failed:\n{r.stderr}")
    table = r.stderr[r.stderr.index("(--stats):") + len("(--stats):"):].strip("\n")
    with open(os.path.join(out, "trace_stats.txt"), "w") as f:
        f.write(table + "\n")
    draw(trace, os.path.join(out, "trace_timeline.png"))
    print(table)
    print(f"wrote {out}/trace_timeline.png, trace_stats.txt, trace_example.json")


if __name__ == "__main__":
    main()
