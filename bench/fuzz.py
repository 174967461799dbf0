"""Long fuzz run (issue 18 item 13): the suite's two properties for thousands of examples.

    python bench/fuzz.py --kind graphs --examples 5000 --seed 1   # one (random graph, preset) per example
    python bench/fuzz.py --kind files --examples 5000 --seed 1    # corrupted model / .npz / .npy

Unlike ``tests/test_fuzz.py`` this does not stop at the first failure: every failure is recorded,
grouped by exception type and first message line, with one reproducer each (the drawn graph's ops
or the corruption), and written as JSON (``--json``). Findings go to ``bench/RESULTS.md``.
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import collections
import io
import json
import logging
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_small_cnn, small_cnn_feeds  # noqa: E402

from testkit.fuzz import (  # noqa: E402
    FUZZ_PRESETS,
    check_corrupt_model,
    check_quantize,
    corrupt,
    corruptions,
    random_graphs,
)


class ExampleTimeout(Exception):
    """One example ran past ``--timeout`` seconds: recorded as a failure with its reproducer."""


class time_limit:
    """``with time_limit(s):`` raises :class:`ExampleTimeout` after ``s`` seconds (SIGALRM, main thread)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def _expired(self, signum: int, frame: Any) -> None:
        raise ExampleTimeout(f"example ran past {self.seconds:g} s")

    def __enter__(self) -> None:
        self.previous = signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


class Tally:
    """Outcomes by kind, failures by (type, first line) with the first reproducer of each.

    ``slowest`` keeps the ten slowest examples with their reproducers: a fuzz run that does not
    finish is itself a finding (an input that makes one quantization run for minutes).
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.failures: collections.Counter[str] = collections.Counter()
        self.repro: dict[str, Any] = {}
        self.timeout = timeout
        self.slowest: list[tuple[float, Any]] = []

    def timed(self, seconds: float, repro: Any) -> None:
        self.slowest = sorted([*self.slowest, (round(seconds, 2), repro)], key=lambda item: -item[0])[:10]

    def fail(self, exc: BaseException, repro: Any) -> None:
        key = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        self.failures[key] += 1
        if key not in self.repro:
            self.repro[key] = {"input": repro, "traceback": traceback.format_exc(limit=-6)}

    def as_json(self) -> dict[str, Any]:
        return {"outcomes": dict(self.outcomes.most_common()), "failures": dict(self.failures.most_common()), "repro": self.repro,
                "slowest": [{"seconds": s, "input": r} for s, r in self.slowest]}


def run_graphs(n: int, seed_value: int, tally: Tally) -> None:
    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(random_graphs(), st.sampled_from(FUZZ_PRESETS))
    def one(graph, preset):
        repro = {"preset": preset, "ops": graph.ops, "shape": graph.input_shape, "dtype": str(np.dtype(graph.dtype)),
                 "opset": graph.model.opset_import[0].version}
        t0 = time.perf_counter()
        try:
            with time_limit(tally.timeout):
                outcome = check_quantize(graph, preset)
            tally.outcomes["ok" if outcome.ok else outcome.error.split(":")[0]] += 1
        except BaseException as exc:  # noqa: BLE001 - recorded, the run goes on
            if isinstance(exc, KeyboardInterrupt):
                raise
            tally.fail(exc, repro)
        tally.timed(time.perf_counter() - t0, repro)

    one()


def run_files(n: int, seed_value: int, tally: Tally) -> None:
    buf = io.BytesIO()
    np.savez(buf, x=np.concatenate([f["x"] for f in small_cnn_feeds(3)]))
    npz = buf.getvalue()
    buf = io.BytesIO()
    np.save(buf, small_cnn_feeds(1)[0]["x"])
    files = {"model": make_small_cnn().SerializeToString(), "npz": npz, "npy": buf.getvalue()}
    folder = Path(tempfile.mkdtemp(prefix="onnxptq-fuzz-"))
    (folder / "m.onnx").write_bytes(files["model"])
    (folder / "d.npz").write_bytes(npz)
    (folder / "calib").mkdir()

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(st.sampled_from(sorted(files)), st.data())
    def one(kind, data):
        how = data.draw(corruptions(len(files[kind])))
        damaged = corrupt(files[kind], how)
        repro = {"kind": kind, "corruption": how}
        t0 = time.perf_counter()
        try:
            with time_limit(tally.timeout):
                result = quantize_damaged(kind, damaged)
            tally.outcomes[f"{kind}: {result}"] += 1
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            tally.fail(exc, repro)
        tally.timed(time.perf_counter() - t0, repro)

    def quantize_damaged(kind: str, damaged: bytes) -> str:
        if kind == "model":
            (folder / "bad.onnx").write_bytes(damaged)
            return check_corrupt_model(folder / "bad.onnx", folder / "d.npz")
        if kind == "npz":
            (folder / "bad.npz").write_bytes(damaged)
            return check_corrupt_model(folder / "m.onnx", folder / "bad.npz")
        (folder / "calib" / "0.npy").write_bytes(damaged)
        return check_corrupt_model(folder / "m.onnx", folder / "calib")

    one()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("graphs", "files"), required=True)
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the tally here")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one example may take before it is recorded as a failure")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    tally = Tally(args.timeout)
    t0 = time.perf_counter()
    (run_graphs if args.kind == "graphs" else run_files)(args.examples, args.seed, tally)
    elapsed = time.perf_counter() - t0
    print(f"{args.kind}: {args.examples} examples, seed {args.seed}, {elapsed:.0f} s")
    for key, count in tally.outcomes.most_common():
        print(f"  {count:6d}  {key}")
    print(f"failures: {sum(tally.failures.values())}")
    for key, count in tally.failures.most_common():
        print(f"  {count:6d}  {key}\n          repro: {tally.repro[key]['input']}")
    print("slowest examples:")
    for seconds, repro in tally.slowest[:5]:
        print(f"  {seconds:8.2f} s  {repro}")
    if args.json:
        Path(args.json).write_text(json.dumps({"kind": args.kind, "examples": args.examples, "seed": args.seed,
                                               "seconds": round(elapsed), **tally.as_json()}, indent=1, default=str))
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
