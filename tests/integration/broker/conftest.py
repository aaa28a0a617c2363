import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402

from brokerlib import Broker, Client  # noqa: E402


@pytest.fixture
def make_broker(tmp_path):
    started = []

    def make(**opts):
        b = Broker(tmp_path / ("data%d" % len(started)), **opts).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


@pytest.fixture
def broker(make_broker):
    return make_broker()


@pytest.fixture
def client(broker):
    c = Client(broker.ep["rpc"])
    yield c
    c.close()
