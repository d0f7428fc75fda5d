"""Markdown tables of benchmarks/torch_backend.py records: the "commlib" torch.distributed backend against "gloo".

usage: python benchmarks/torch_backend_table.py RESULTS.jsonl [MORE.jsonl ...]

For every (n, op, size): the median over rounds of each backend's median time
(µs; DDP: ms per training step) with its spread over rounds, ±(max - min) /
median, then gloo / commlib as a time ratio (above 1: commlib faster) and,
for the collectives, both busbw and commlib / gloo busbw; last, commlib-api
(the same points timed through commlib's own API, torch_backend.py --backend
commlib-api; for the training ops the same step with no communication) with its spread, and commlib / api, the time ratio that is
the torch layer's cost over commlib's API (~1.0: free). Then the targets, one
row per (n, op) and one summary line per target:

    busbw ≥ 2× gloo at 1–64 MiB    commlib / gloo busbw ≥ 2 at every size from 1 to 64 MiB
    latency at 8 B ≤ 0.2× gloo     commlib / gloo time ≤ 0.2 at the smallest size (8 B; all_gather
                                   and reduce_scatter round it up to n float32 elements)
    DDP step ≤ 0.8× gloo           commlib / gloo step time ≤ 0.8 for every training op; where the
                                   step with no communication at all (commlib-api's row: the plain
                                   model's step) is itself above 0.8× gloo's step, no backend can meet
                                   it: the row says "floor" and which share of the step is compute
    torch layer ≤ 1.2× commlib's API
                                   commlib / commlib-api time ≤ 1.2 at every size (the issue's target;
                                   torch's own dist.* call costs ~2.7 µs before any backend runs, so
                                   small sizes are out of reach for a backend torch calls through Python)
"""
import collections
import sys

from _benchlib import MiB, cells, load, med, missing_line, op_order, print_failed, rounds_per_impl, size_name, \
    spread, us

BACKENDS = ("commlib", "gloo", "commlib-api")
COLL_OPS = ("all_reduce", "all_gather", "reduce_scatter")
DDP_OPS = ("ddp_mlp", "ddp_cnn", "ddp_transformer", "fsdp2_mlp", "dtensor_redistribute")
OP_ORDER = COLL_OPS + DDP_OPS
BW_TARGET, LAT_TARGET, DDP_TARGET = 2.0, 0.2, 0.8
API_TARGET = 1.2


def ddp_size(b):
    return f"{b / MiB:.1f} MiB params" if b >= MiB else f"{b / 1024:.0f} KiB params"


def ms(v):
    return "–" if v is None else f"{v / 1000:.1f}"


def main(paths):
    recs, failed, errors, _ = load(paths)
    cell, bw = cells(recs)  # (backend, n, op, bytes) -> [median_us per round], [busbw per round]
    ns = sorted({k[1] for k in cell})
    ops = op_order(cell, OP_ORDER)
    rounds = rounds_per_impl(cell, BACKENDS)
    print("Median over rounds (rounds per backend: " + ", ".join(f"{b} {rounds[b]}" for b in BACKENDS)
          + ") of each run's median time per call (collectives: µs; DDP: ms per training step), "
          "± the spread over rounds, (max − min) / median. gloo / commlib is a time ratio (above 1: commlib "
          "faster); commlib / gloo busbw above 1: commlib faster. commlib-api: the same calls through "
          "commlib's own API; commlib / api is a time ratio, the torch layer's cost over "
          "commlib's API (~1.0: free). For the training ops commlib-api is the same step with no "
          "communication at all (the plain model; the floor of any backend) and commlib / api the "
          "step's time over that floor.\n")
    lat, bwr, ddp, api = [], [], [], []  # (n, op, size, ratio) rows for the targets
    for n in ns:
        print(f"### n = {n}\n")
        print("| op | size | commlib | gloo | gloo / commlib (time) | commlib busbw GB/s | gloo busbw GB/s "
              "| commlib / gloo (busbw) | commlib-api | commlib / api (time) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for op in ops:
            sizes = sorted({k[3] for k in cell if k[1] == n and k[2] == op})
            is_ddp = op in DDP_OPS
            fmt = ms if is_ddp else us
            for i, b in enumerate(sizes):
                t = {be: med(cell, (be, n, op, b)) for be in BACKENDS}
                w = {be: med(bw, (be, n, op, b)) for be in BACKENDS}
                sp = {be: spread(cell.get((be, n, op, b))) for be in BACKENDS}
                tr = t["gloo"] / t["commlib"] if t["gloo"] and t["commlib"] else None
                br = w["commlib"] / w["gloo"] if not is_ddp and w["gloo"] and w["commlib"] is not None else None
                ar = t["commlib"] / t["commlib-api"] if not is_ddp and t["commlib"] and t["commlib-api"] else None
                smallest = not is_ddp and i == 0 and b <= 4 * max(2, n)
                if tr is not None:
                    if is_ddp:
                        floor = t["commlib-api"] / t["gloo"] if t["commlib-api"] else None
                        ddp.append((n, op, b, 1 / tr, floor))
                    elif smallest:
                        lat.append((n, op, b, 1 / tr))
                if br is not None and MiB <= b <= 64 * MiB:
                    bwr.append((n, op, b, br))
                if ar is not None:
                    api.append((n, op, b, ar))
                cols = [op, ddp_size(b) if is_ddp else size_name(b),
                        f"{fmt(t['commlib'])}{sp['commlib']}", f"{fmt(t['gloo'])}{sp['gloo']}",
                        "–" if tr is None else f"{tr:.2f}"]
                if is_ddp:  # no busbw for a training step; commlib-api: the step with no communication
                    cols += ["", "", ""]
                    cols += [f"{ms(t['commlib-api'])}{sp['commlib-api']}" + (" (compute)" if t["commlib-api"] else ""),
                             "–" if not (t["commlib"] and t["commlib-api"]) else f"{t['commlib'] / t['commlib-api']:.2f}"]
                else:
                    cols += ["–" if w[be] is None else f"{w[be]:.3g}" for be in ("commlib", "gloo")]
                    cols.append("–" if br is None else f"{br:.2f}")
                    cols += [f"{us(t['commlib-api'])}{sp['commlib-api']}", "–" if ar is None else f"{ar:.2f}"]
                print("| " + " | ".join(cols) + " |")
        print()

    verdicts = []
    for title, vs, nodata, targets in (
            ("Targets", "commlib / gloo", "both backends needed", (
                ("busbw ≥ 2× gloo at 1–64 MiB", bwr, lambda v: v >= BW_TARGET, "busbw", min),
                ("latency at 8 B ≤ 0.2× gloo", lat, lambda v: v <= LAT_TARGET, "time", max),
                ("DDP step ≤ 0.8× gloo", ddp, lambda v: v <= DDP_TARGET, "step time", max))),
            ("Targets: the torch layer over commlib's API", "commlib / api", "commlib and commlib-api needed", (
                ("torch layer ≤ 1.2× commlib's API", api, lambda v: v <= API_TARGET, "time", max),))):
        if any(rows for _, rows, _, _, _ in targets):
            print(f"### {title}\n")
            print(f"| target | n | op | worst size | {vs} | met |")
            print("|---|---|---|---:|---:|:---:|")
        for name, rows, ok, what, worst_of in targets:
            groups = collections.defaultdict(list)
            for n, op, b, v, *floor in rows:
                groups[(n, op)].append((v, b, floor[0] if floor else None))
            for (n, op), vals in sorted(groups.items(), key=lambda kv: (kv[0][0], ops.index(kv[0][1]))):
                v, b, floor = worst_of(vals)
                size = ddp_size(b) if op in DDP_OPS else size_name(b)
                met = "yes" if all(ok(x) for x, _, _ in vals) else "**no**"
                if met != "yes" and floor is not None and not ok(floor):
                    met = f"floor: the step with no communication is {floor:.2f}× gloo's"
                print(f"| {name} | {n} | {op} | {size} | {v:.2f} ({what}) | {met} |")
            if not rows:
                verdicts.append(f"- **{name}**: no data ({nodata})")
                continue
            misses = [r for r in rows if not ok(r[3])]
            unreachable = [r for r in misses if len(r) > 4 and r[4] is not None and not ok(r[4])]
            v, n, op, b = worst_of((r[3], r[0], r[1], r[2]) for r in rows)
            where = f"n={n} {op} {ddp_size(b) if op in DDP_OPS else size_name(b)}"
            floor_note = (f" ({len(unreachable)} of the misses where the step with no communication is itself "
                          "above the target: out of any backend's reach)" if unreachable else "")
            verdicts.append(f"- **{name}**: {'met' if not misses else 'NOT met'} — {len(rows) - len(misses)} of "
                            f"{len(rows)} points meet it{floor_note}; worst {vs} {what} {v:.2f} ({where})")
        if any(rows for _, rows, _, _, _ in targets):
            print()
    print("\n".join(verdicts))
    print()
    if failed:
        print_failed(failed)
        print()
    if errors:
        print(f"**{len(errors)} op(s) raised:**\n")
        for r in errors:
            size = "" if r.get("bytes") is None else f" {size_name(r['bytes'])}"
            print(f"- {r['impl']} n={r['n']} {r['op']}{size} round {r.get('round')}: {r['error']}")
        print()
    line = missing_line(cell, BACKENDS, ns)
    if line:
        print(line)

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
