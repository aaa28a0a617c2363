"""`lisa plot`: metrics.jsonl -> SVG, checked by parsing the SVG."""
import json
import math
import os
import subprocess
import xml.etree.ElementTree as ET

BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
SVG = "{http://www.w3.org/2000/svg}"


def plot(tmp_path, lines, *args):
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(lines))
    out = tmp_path / "out.svg"
    r = subprocess.run([f"{BIN}/lisa", "plot", str(m), "-o", str(out), *args],
                       capture_output=True, text=True, timeout=60)
    return r, out


def series(svg_path):
    root = ET.parse(svg_path).getroot()
    got = {}
    for pl in root.iter(f"{SVG}polyline"):
        pts = [tuple(map(float, p.split(","))) for p in pl.get("points").split()]
        got[pl.get("data-key")] = pts
    return root, got


def test_usage_draws_each_metric_against_step(tmp_path):
    recs = []
    for s in range(1, 31):
        recs.append(json.dumps({
            "step": s,
            "reward/mean": 0.1 + 0.02 * s,
            "reward/math_toy/mean": 0.05 + 0.025 * s,
            "actor/pg_loss": math.sin(s),
            "actor/entropy": 2.0 - 0.05 * s,
            "actor/grad_norm": 1.0,
            "run": "text values are skipped",
        }) + "\n")
    r, out = plot(tmp_path, recs, "--title", "toy <run>")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    root, got = series(out)
    assert set(got) == {"reward/mean", "reward/math_toy/mean", "actor/pg_loss",
                        "actor/entropy", "actor/grad_norm"}
    for key, pts in got.items():
        assert len(pts) == 30, key
        xs = [p[0] for p in pts]
        assert xs == sorted(xs) and len(set(xs)) == 30
    # A rising metric goes up the page (SVG y grows downwards); a falling
    # one goes down; a straight line stays straight.
    ys = [p[1] for p in got["reward/mean"]]
    assert all(b < a for a, b in zip(ys, ys[1:]))
    ys = [p[1] for p in got["actor/entropy"]]
    assert all(b > a for a, b in zip(ys, ys[1:]))
    ys = [p[1] for p in got["actor/grad_norm"]]
    assert max(ys) - min(ys) < 1e-6
    text = "".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "toy <run>" in text and "30 records" in text


def test_bad_lines_are_skipped_and_counted(tmp_path):
    recs = ['{"step": 1, "loss": 1.0}\n', "not json\n", "[1, 2]\n", "\n",
            '{"step": 2, "loss": 0.5}\n', '{"step": 3, "loss": "NaN"}\n']
    r, out = plot(tmp_path, recs)
    assert r.returncode == 0, r.stderr
    root, got = series(out)
    assert list(got) == ["loss"] and len(got["loss"]) == 2
    text = "".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "3 records, 2 skipped lines" in text
    assert "no data" in text  # the reward, entropy, grad_norm panels


def test_custom_panels_and_line_number_steps(tmp_path):
    recs = [json.dumps({"a/x": float(i), "b/y": float(-i)}) + "\n"
            for i in range(5)]
    r, out = plot(tmp_path, recs, "--panel", "a/", "--panel", "b/")
    assert r.returncode == 0, r.stderr
    _, got = series(out)
    assert set(got) == {"a/x", "b/y"} and len(got["a/x"]) == 5


def test_errors(tmp_path):
    r = subprocess.run([f"{BIN}/lisa", "plot"], capture_output=True, timeout=30)
    assert r.returncode == 2
    r = subprocess.run([f"{BIN}/lisa", "plot", str(tmp_path / "missing")],
                       capture_output=True, timeout=30)
    assert r.returncode == 1
    r, _ = plot(tmp_path, ['{"step": 1}\n'], "-o")
    assert r.returncode == 2
