import os
import sys

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "broker"))

import pytest  # noqa: E402

from gwlib import Engine, Gateway  # noqa: E402


@pytest.fixture
def key():
    return os.urandom(32)


@pytest.fixture
def make_engine():
    made = []

    def make(script, **kw):
        e = Engine(script, **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture
def make_gateway(tmp_path, key):
    started = []

    def make(**opts):
        g = Gateway(tmp_path / ("gw%d" % len(started)), key, **opts).start()
        started.append(g)
        return g

    yield make
    for g in started:
        g.stop()


@pytest.fixture
def make_broker(tmp_path):
    from brokerlib import Broker
    started = []

    def make(**opts):
        b = Broker(tmp_path / ("brk%d" % len(started)), **opts).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()
