"""scripts/progress.sh, the progress display of scripts/run.sh, driven
with the trainer's two files (progress.log: step lines; progress.now: the
running step's live line): on a terminal (a pty here) the live line is
redrawn in place with \\r and erased before the step line replaces it;
through a pipe only plain lines come out, with no control characters."""
import os
import pty
import subprocess

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", "..", ".."))

LIVE1 = "  step 1 of 2: rollouts 1/4 (0 failed), 12 tokens, 1.0s, ETA 3.0s"
LIVE2 = "  step 1 of 2: rollouts 3/4 (1 failed), 40 tokens, 3.0s, ETA 1.0s"
STEP1 = "step 1 of 2  reward 0.500 \u00b10.500  rollouts 3/4 (1 failed)"
LIVE3 = "  step 2 of 2: rollouts 0/4 (0 failed), 0 tokens, 0.1s, ETA -"
STEP2 = "step 2 of 2  reward 0.750 \u00b10.433  rollouts 4/4"

# each "tick" changes the files as the trainer would, then calls progress
DRIVER = r"""
set -euo pipefail
. "$1/scripts/progress.sh"
d=$2
progress_init "$d"
progress                      # nothing yet
printf '%s\n' "$L1" > "$d/progress.now"; progress
printf '%s\n' "$L2" > "$d/progress.now"; progress
rm "$d/progress.now"; printf '%s\n' "$S1" >> "$d/progress.log"
printf '%s\n' "$L3" > "$d/progress.now"; progress
rm "$d/progress.now"; printf '%s\n' "$S2" >> "$d/progress.log"; progress
progress                      # nothing new
progress_end
echo END
"""


def run(tmp_path, tty):
    env = dict(os.environ, L1=LIVE1, L2=LIVE2, L3=LIVE3, S1=STEP1, S2=STEP2,
               TERM="xterm", LC_ALL="C.UTF-8")
    cmd = ["bash", "-c", DRIVER, "drive", SRC, str(tmp_path)]
    if not tty:
        return subprocess.run(cmd, env=env, capture_output=True, timeout=30,
                              check=True).stdout.decode()
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, env=env, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the pty closed: the driver is done
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=30) == 0, p.stderr.read()
    return out.decode().replace("\r\n", "\n")


def test_terminal_redraws_the_live_line_in_place(tmp_path):
    out = run(tmp_path, tty=True)
    clr = "\r\x1b[K"
    assert out == (clr + LIVE1 + clr + LIVE2 + clr + STEP1 + "\n" +
                   clr + LIVE3 + clr + STEP2 + "\n" + "END\n"), repr(out)


def test_a_pipe_gets_plain_lines(tmp_path):
    out = run(tmp_path, tty=False)
    assert "\r" not in out and "\x1b" not in out
    # the first live line (then none for a minute), the step lines
    assert out.splitlines() == [LIVE1, STEP1, STEP2, "END"], out
