"""`lisa plot`: metrics.jsonl -> SVG (and a PNG where a converter is
installed), checked by parsing the SVG: each kind of metric in its own
panel, the reward panel on the rewards' axis (0..1, or their own range),
never the rollout counts', with std or min-max bands around the means."""
import json
import math
import os
import shutil
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


def converter():
    """Whether `lisa plot` has a PNG converter: rsvg-convert, ImageMagick's
    magick, or a convert that says it is ImageMagick."""
    if shutil.which("rsvg-convert") or shutil.which("magick"):
        return True
    if not shutil.which("convert"):
        return False
    r = subprocess.run(["convert", "-version"], capture_output=True,
                       text=True, timeout=30)
    return r.stdout.startswith("Version: ImageMagick")


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
    printed = r.stdout.split()
    assert printed[0] == str(out)
    if converter():  # the PNG beside the SVG, its path on the next line
        png = str(out)[:-4] + ".png"
        assert printed == [str(out), png]
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    else:
        assert printed == [str(out)]
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


def panels(svg_path):
    """{title: (group, frame rect, {key: points}, {key: band polygon})}"""
    root = ET.parse(svg_path).getroot()
    got = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") != "panel":
            continue
        frame = [r for r in g.iter(f"{SVG}rect") if r.get("class") == "frame"][0]
        lines = {pl.get("data-key"): [tuple(map(float, p.split(",")))
                                      for p in pl.get("points").split()]
                 for pl in g.iter(f"{SVG}polyline")}
        bands = {pg.get("data-key"): pg for pg in g.iter(f"{SVG}polygon")}
        got[g.get("data-title")] = (g, frame, lines, bands)
    return got


def value_at(frame, g, py):
    """The data value of a pixel row of a panel (its axis range)."""
    top, h = float(frame.get("y")), float(frame.get("height"))
    y0, y1 = float(g.get("data-y0")), float(g.get("data-y1"))
    return y0 + (top + h - py) / h * (y1 - y0)


def lisa_record(s, reward, **extra):
    rec = {"kind": "train", "step": s, "reward/mean": reward,
           "reward/std": 0.2, "reward/min": 0.0, "reward/max": 1.0,
           "reward/math/mean": reward, "reward/math/count": 32,
           "reward/bio/mean": reward / 2, "reward/bio/count": 32,
           "rollouts/total": 64, "rollouts/succeeded": 64,
           "rollouts/failed": 0, "batch/tokens": 12000,
           "response_length/mean": 150.0, "response_length/std": 30.0,
           "actor/entropy": 1.5, "actor/grad_norm": 0.7,
           "actor/ppo_kl": 0.001, "loss/kl": 0.002,
           "actor/pg_clipfrac": 0.01, "loss/total": 0.3,
           "time/step_s": 4.2, "time/rollout_s": 3.1}
    rec.update(extra)
    return json.dumps(rec) + "\n"


def test_reward_panel_is_on_the_rewards_axis_not_the_counts(tmp_path):
    recs = [lisa_record(s, 0.2 + 0.02 * s) for s in range(1, 21)]
    recs.append(json.dumps({"kind": "val", "step": 20,
                            "val/reward/mean": 0.55, "val/reward/std": 0.5,
                            "val/reward/math/mean": 0.6,
                            "val/reward/math/count": 10,
                            "val/rollouts": 20, "val/failed": 1}) + "\n")
    r, out = plot(tmp_path, recs, "--no-png")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(out)]
    p = panels(out)
    g, frame, lines, bands = p["reward"]
    # the axis is 0..1, whatever the counts beside the rewards are
    assert (float(g.get("data-y0")), float(g.get("data-y1"))) == (0.0, 1.0)
    ticks = [float(t.text) for t in g.iter(f"{SVG}text")
             if t.get("class") == "ytick"]
    assert min(ticks) == 0 and max(ticks) == 1, ticks
    assert set(lines) == {"reward/mean", "reward/math/mean", "reward/bio/mean",
                          "val/reward/mean", "val/reward/math/mean"}
    # each point sits where its value is on that axis
    for i, (_, py) in enumerate(lines["reward/mean"]):
        assert abs(value_at(frame, g, py) - (0.2 + 0.02 * (i + 1))) < 0.01
    # bands: std around the means, clipped to the axis
    assert bands["reward/mean"].get("data-kind") == "std"
    assert bands["val/reward/mean"].get("data-kind") == "std"
    ys = [float(q.split(",")[1])
          for q in bands["reward/mean"].get("points").split()]
    top, h = float(frame.get("y")), float(frame.get("height"))
    assert top - 0.5 <= min(ys) and max(ys) <= top + h + 0.5
    # the counts have a panel of their own
    _, _, clines, _ = p["rollouts"]
    assert {"reward/math/count", "rollouts/total", "val/rollouts"} <= set(clines)
    # and so does each other kind
    assert set(p["time (s)"][2]) == {"time/step_s", "time/rollout_s"}
    assert set(p["entropy"][2]) == {"actor/entropy"}
    assert set(p["grad norm"][2]) == {"actor/grad_norm"}
    assert set(p["KL"][2]) == {"actor/ppo_kl", "loss/kl"}
    assert set(p["clip fractions"][2]) == {"actor/pg_clipfrac"}
    assert set(p["response length"][2]) == {"response_length/mean"}
    assert "response_length/mean" in p["response length"][3]
    assert set(p["tokens"][2]) == {"batch/tokens"}
    assert set(p["loss"][2]) == {"loss/total"}
    g, _, _, _ = p["rollouts"]
    assert float(g.get("data-y1")) >= 64


def test_rewards_outside_0_1_get_their_own_range_and_min_max_bands(tmp_path):
    recs = [json.dumps({"step": s, "reward/mean": -1.0 + 0.1 * s,
                        "reward/min": -2.0 + 0.1 * s,
                        "reward/max": 0.5 + 0.1 * s,
                        "reward/math/count": 64}) + "\n"
            for s in range(1, 11)]
    r, out = plot(tmp_path, recs, "--no-png")
    assert r.returncode == 0, r.stderr
    g, frame, lines, bands = panels(out)["reward"]
    y0, y1 = float(g.get("data-y0")), float(g.get("data-y1"))
    # the band's extremes (-1.9 .. 1.5) fit, with a little margin only
    assert y0 <= -1.9 and y1 >= 1.5 and y1 - y0 < 4, (y0, y1)
    assert set(lines) == {"reward/mean"}
    assert bands["reward/mean"].get("data-kind") == "min-max"
    for i, (_, py) in enumerate(lines["reward/mean"]):
        assert abs(value_at(frame, g, py) - (-1.0 + 0.1 * (i + 1))) < 0.02


def test_verl_metric_names(tmp_path):
    recs = [json.dumps({"training/global_step": s,
                        "critic/score/mean": 0.1 * s, "critic/score/max": 1.0,
                        "critic/score/min": 0.0,
                        "val-core/math/reward/mean@1": 0.05 * s,
                        "actor/kl_loss": 0.01, "actor/pg_loss": 0.2,
                        "timing_s/step": 30.0,
                        "response_length/mean": 200.0}) + "\n"
            for s in range(1, 6)]
    r, out = plot(tmp_path, recs, "--no-png")
    assert r.returncode == 0, r.stderr
    p = panels(out)
    g, _, lines, bands = p["reward"]
    assert set(lines) == {"critic/score/mean", "val-core/math/reward/mean@1"}
    assert bands["critic/score/mean"].get("data-kind") == "min-max"
    assert (float(g.get("data-y0")), float(g.get("data-y1"))) == (0.0, 1.0)
    assert set(p["KL"][2]) == {"actor/kl_loss"}
    assert set(p["loss"][2]) == {"actor/pg_loss"}
    assert set(p["time (s)"][2]) == {"timing_s/step"}
