import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from stacklib import Stack, live_with, wait_for  # noqa: E402


@pytest.fixture
def make_stack():
    """Stacks for one test; afterwards no sandbox process of theirs may be
    left (their scratch directory is in every sandbox's command line)."""
    made = []

    def make(script, **kw):
        s = Stack(script, **kw)
        made.append(s)
        return s

    yield make
    leaked = []
    for s in made:
        s.close()
        s.dump()  # shown by pytest when the test failed
        try:
            wait_for(lambda: not live_with(s.dir), timeout=5, what="gone")
        except AssertionError:
            leaked += live_with(s.dir)
        subprocess.run(["rm", "-rf", s.dir], check=False)
    assert not leaked, f"sandbox processes outlived the test: {leaked}"
