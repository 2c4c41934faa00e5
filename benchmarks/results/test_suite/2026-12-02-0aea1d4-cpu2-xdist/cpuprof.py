"""Per-test CPU (self + reaped children) and wall, written to $CPUPROF_OUT (tab separated)."""

import os
import resource
import time

import pytest

_rows = []


def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    w0 = time.monotonic()
    s0, c0 = _cpu()
    yield
    s1, c1 = _cpu()
    _rows.append((item.nodeid, time.monotonic() - w0, s1 - s0, c1 - c0))


def pytest_sessionfinish(session):
    out = os.environ.get("CPUPROF_OUT")
    if out:
        wid = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{out}.{wid}", "w") as f:
            for r in _rows:
                f.write("{}\t{:.2f}\t{:.2f}\t{:.2f}\n".format(*r))
