"""A pytest plugin that records each test's CPU seconds, for test-suite time work (branch suitetrim).

``--durations`` reports wall time, which on the shared 2-core machine is mostly waiting for a core
(6 agents, load 15-25: wall 5-12x CPU). This records ``time.process_time`` around each test's whole
protocol (setup, call, teardown; every thread of the worker process, onnxruntime's pools included)
and its finished child processes' CPU (``children_cpu``)
as one JSON line per test in ``$TEST_CPU_OUT`` (default ``test_cpu.jsonl``), with wall seconds and
the xdist worker, so two source trees' figures can be compared under different loads.

    PYTHONPATH=<tree>/src:<tree>:<repo>/bench TEST_CPU_OUT=/tmp/cpu.jsonl \\
        python -m pytest -p cpu_per_test -q -p no:cacheprovider tests/test_quantize_ppocr.py
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest


def _children_cpu() -> float:
    """CPU s of the worker's finished child processes (CLI runs, a search's worker pool): a test that
    waits on a child shows wall time and no CPU of its own."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall, children = time.process_time(), time.perf_counter(), _children_cpu()
    yield
    row = {"id": item.nodeid, "cpu": round(time.process_time() - cpu, 2), "wall": round(time.perf_counter() - wall, 2),
           "children_cpu": round(_children_cpu() - children, 2),
           "worker": os.environ.get("PYTEST_XDIST_WORKER", "-"), "load": round(os.getloadavg()[0], 1)}
    with open(os.environ.get("TEST_CPU_OUT", "test_cpu.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
