"""bench/trainer/trace_report.py on timelines laid out as `trn_bench
--trace` writes them (one record a block: start, past the wait, end, kind,
shape, grid): the separate decode kernels of a layer. Each launch must
come out whole, with its role, its busy time and its read rate."""
import csv
import os
import re
import subprocess
import sys

REPORT = os.path.join(os.environ["LISA_SOURCE_DIR"], "bench", "trainer",
                      "trace_report.py")
FIELDS = ["t_start", "t_wait", "t_end", "kind", "a", "b", "grid", "block",
          "sm"]


def timeline(path, layers, kernels):
    """kernels: (kind, a, b, grid, busy ns); each runs after the one before
    it, blocks past their waits 0..grid-1 ns apart, the last ending busy ns
    after the first wait."""
    rows, t = [], 10_000
    for _ in range(layers):
        for kind, a, b, grid, busy in kernels:
            for blk in range(grid):
                rows.append({"t_start": t - 400, "t_wait": t + blk,
                             "t_end": t + busy - (grid - 1 - blk), "kind": kind,
                             "a": a, "b": b, "grid": grid, "block": blk,
                             "sm": blk % 132})
            t += busy + 300
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


def report(path):
    r = subprocess.run([sys.executable, REPORT, str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    table = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^(\S+(?: \S+)?)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+\S+"
                     r"\s+\S+\s+\S+\s+(\S+)", line)
        if m and not line.startswith("role"):
            table[m.group(1)] = (int(m.group(2)), int(m.group(3)),
                                 float(m.group(5)), m.group(6))
    return r.stdout, table


def test_separate_kernels(tmp_path):
    p = tmp_path / "sep.csv"
    timeline(p, 3, [(9, 2560, 0, 8, 1_700), (3, 6144, 2560, 384, 9_000),
                    (7, 32, 4, 256, 28_000), (8, 32, 4, 256, 5_000),
                    (3, 2560, 4096, 160, 8_000), (9, 2560, 0, 8, 1_700),
                    (4, 19456, 2560, 396, 28_000),
                    (3, 2560, 9728, 160, 16_000)])
    out, t = report(p)
    assert "24 launches" in out, out
    assert set(t) == {"norm>qkv", "q|k|v", "attn", "merge", "o",
                      "norm>gate|up", "gate|up", "down"}, out
    assert all(v[0] == 3 for v in t.values()), out
    assert t["gate|up"][1] == 396 and t["gate|up"][2] == 28.0, out
    # weights over busy time: 19456 x 2560 x 2 bytes in 28 us
    assert t["gate|up"][3] == "%.0f" % (19456 * 2560 * 2 / 28_000), out
    assert "one layer (launches 8-15)" in out, out

