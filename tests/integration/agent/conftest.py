"""Shared pytest settings of the agent and controller suites."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "broker_opts(**opts): options of the test's lisa-broker")
