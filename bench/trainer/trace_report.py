#!/usr/bin/env python3
"""Reads the decode kernels' timeline that `trn_bench --batch B --trace
FILE` writes (a build with the LISA_CUDA_TRACE option) and says where a
step's time goes between and inside its kernels, by role in the layer
(q|k|v, attention, merge, o, the norms, gate|up, down).

For each launch, from its blocks' records (global timer, ns):
  gap    the previous launch's last block end -> this one's first block
         past its wait (the dependency's hand-over);
  busy   first block past its wait -> last block end;
  ramp   first block past its wait -> its first block end;
  tail   the median block end -> the last block end;
  early  first block start -> first block past its wait (how long blocks
         sat resident before their inputs were ready).
Products also get their weights' bytes over `busy` (GB/s).

    trace_report.py FILE [--read-gbs 4100]
"""
import argparse
import csv
import statistics
import sys

KINDS = {1: "skinny", 2: "skinny_glu", 3: "bulk", 4: "bulk_glu", 5: "gemv",
         6: "gemv_glu", 7: "attn", 8: "merge", 9: "norm"}
PRODUCTS = {1, 2, 3, 4, 5, 6}
GLU = {2, 4, 6}


def load(path):
    with open(path) as f:
        rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if not rows:
        sys.exit(f"{path}: no records")
    return rows


def launches(rows):
    """Blocks grouped into launches: sorted by the time past the wait, a
    launch takes `grid` consecutive blocks of one kind and shape (a
    kernel's blocks pass their wait only after the kernel before ended)."""
    rows = sorted(rows, key=lambda r: (r["t_wait"], r["t_start"]))
    out, cur = [], None
    for r in rows:
        key = (r["kind"], r["a"], r["b"], r["grid"])
        if cur is None or cur["key"] != key or len(cur["blocks"]) >= r["grid"]:
            cur = {"key": key, "blocks": []}
            out.append(cur)
        cur["blocks"].append(r)
    for ln in out:
        b = ln["blocks"]
        ends = sorted(x["t_end"] for x in b)
        ln["start"] = min(x["t_start"] for x in b)
        ln["wait"] = min(x["t_wait"] for x in b)
        ln["end"] = ends[-1]
        ln["first_end"] = ends[0]
        ln["median_end"] = ends[len(ends) // 2]
        ln["complete"] = len(b) == ln["key"][3]
    return out


def role(ln, nxt):
    kind, a, b, _ = ln["key"]
    if kind == 9:
        return "norm>qkv" if nxt and nxt["key"][0] in PRODUCTS and \
            nxt["key"][0] not in GLU else "norm>gate|up"
    if kind in GLU:
        return "gate|up"
    if kind in PRODUCTS:
        n, k = a, b
        if k > 2 * n:
            return "down"
        if n > k:
            return "q|k|v"
        return "o"
    return KINDS.get(kind, str(kind))


def granularity(rows):
    ts = sorted({r[k] for r in rows for k in ("t_start", "t_wait", "t_end")})
    d = [b - a for a, b in zip(ts, ts[1:]) if b > a]
    return min(d) if d else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--read-gbs", type=float, default=4100.0,
                    help="the memory's read rate, for the products' floor")
    o = ap.parse_args()
    rows = load(o.file)
    lns = launches(rows)
    print(f"{len(rows)} blocks, {len(lns)} launches; the global timer's "
          f"smallest step seen: {granularity(rows)} ns")
    by = {}
    for i, ln in enumerate(lns):
        prev = lns[i - 1] if i else None
        nxt = lns[i + 1] if i + 1 < len(lns) else None
        gap = ln["wait"] - prev["end"] if prev else None
        if gap is not None and gap > 50_000:  # another step, or host work
            gap = None
        r = role(ln, nxt)
        st = by.setdefault(r, {"n": 0, "gap": [], "busy": [], "ramp": [],
                               "tail": [], "early": [], "gbs": [],
                               "blocks": ln["key"][3]})
        st["n"] += 1
        if gap is not None:
            st["gap"].append(gap)
        busy = ln["end"] - ln["wait"]
        st["busy"].append(busy)
        st["ramp"].append(ln["first_end"] - ln["wait"])
        st["tail"].append(ln["end"] - ln["median_end"])
        st["early"].append(ln["wait"] - ln["start"])
        kind, a, b, _ = ln["key"]
        if kind in PRODUCTS and busy > 0:
            st["gbs"].append(a * b * 2 / busy)  # bytes / ns = GB/s
    med = statistics.median
    print(f"{'role':14} {'launches':>8} {'blocks':>6} {'gap us':>7} "
          f"{'busy us':>8} {'ramp us':>8} {'tail us':>8} {'early us':>8} "
          f"{'GB/s':>7} {'floor us':>8}")
    total_gap = total_busy = 0.0
    for r, st in by.items():
        g = med(st["gap"]) / 1e3 if st["gap"] else float("nan")
        busy = med(st["busy"]) / 1e3
        gbs = med(st["gbs"]) if st["gbs"] else float("nan")
        floor = busy * gbs / o.read_gbs if st["gbs"] else float("nan")
        total_gap += sum(st["gap"]) / 1e3
        total_busy += sum(st["busy"]) / 1e3
        print(f"{r:14} {st['n']:8d} {st['blocks']:6d} {g:7.2f} {busy:8.2f} "
              f"{med(st['ramp']) / 1e3:8.2f} {med(st['tail']) / 1e3:8.2f} "
              f"{med(st['early']) / 1e3:8.2f} {gbs:7.0f} {floor:8.2f}")
    print(f"sum over the launches: busy {total_busy:.1f} us, "
          f"hand-over gaps {total_gap:.1f} us")
    one_layer(lns)


def one_layer(lns):
    """One layer in the middle of the traced steps, launch by launch, in
    microseconds from its first launch's wait: each kernel's first block
    start, first past the wait, first end, median end and last end."""
    starts = [i for i, ln in enumerate(lns[:-1])
              if role(ln, lns[i + 1]) == "norm>qkv"]
    if len(starts) < 2:
        return
    i0 = starts[len(starts) // 2]
    i1 = next((i for i in starts if i > i0), len(lns))
    t0 = lns[i0]["wait"]
    print(f"\none layer (launches {i0}-{i1 - 1}), us from its first wait:")
    print(f"{'role':14} {'start':>8} {'wait':>8} {'1st end':>8} "
          f"{'med end':>8} {'end':>8}")
    for i in range(i0, i1):
        ln = lns[i]
        nxt = lns[i + 1] if i + 1 < len(lns) else None
        print(f"{role(ln, nxt):14} " + " ".join(
            f"{(ln[k] - t0) / 1e3:8.2f}"
            for k in ("start", "wait", "first_end", "median_end", "end")))


if __name__ == "__main__":
    main()
