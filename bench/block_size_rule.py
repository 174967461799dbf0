"""Where a block body's run-time ``If`` starts to pay (issue 26 item 3, blocklat12): the size rules
``onnx_ops.mx.BRANCHED_INT_MIN_SIZE`` (MX INT8: two ``If`` nodes or the branch-free body),
``onnx_ops.bfp.TO_BFP_FLAT_MAX_SIZE`` (BFP16 ``to_bfp``: the split body's two ``If`` nodes or
``_bfp_flat``) and ``onnx_ops.bfp.FLAT_MAX_SIZE`` (MX9/MX6 ``to_bfp_prime``: the subnormal flush
in a small ``If`` or without one), measured instead of assumed.

For each preset and activation shape (every dim known, blocks along axis 1), two models of ``--calls``
chained quantizer calls on a ``[shape]`` float32 input are built with the library's own ``build``
functions, one with each body (the rule's module constant set to force it, then restored), and
timed round-robin in one process: session creation (CPU s of the process, one thread, all
optimisations, as ``onnxptq.sessions.open_session`` opens the finish session) and one-thread run CPU
per call. Both bodies' outputs are compared bit for bit on the feed (standard normal data with a
few ±0, subnormals, ±Inf and NaN in one copy: both must agree there too). ``--unknown``: every dim
but the block axis's declared unknown (PP-OCR cls's ``[N, C, ?, ?]``) and the size handed to the builders
as the calibration's hint (``observed``, pipeline/observed_sizes.py), the bodies a hinted emit makes.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/block_size_rule.py --presets MXINT8,BFP16,MX9 \
        --shape 1,16,24,96 --shape 1,32,48,48 --shape 1,64,56,56 --calls 20 --rounds 15
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import contextlib
import statistics
import time
from typing import Any, Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxptq.onnx_ops import bfp, mx

#: preset -> (module, the rule's constants (known size, seen size), their value forcing the branched body, forcing the flat one)
RULES: dict[str, tuple[Any, tuple[str, str], int, int]] = {
    "MXINT8": (mx, ("BRANCHED_INT_MIN_SIZE", "BRANCHED_INT_SEEN_MIN_SIZE"), 0, 1 << 40),
    "BFP16": (bfp, ("TO_BFP_FLAT_MAX_SIZE", "TO_BFP_FLAT_SEEN_MAX_SIZE"), 0, 1 << 40),
    "MX9": (bfp, ("FLAT_MAX_SIZE", "FLAT_SEEN_MAX_SIZE"), 0, 1 << 40),
    "MX6": (bfp, ("FLAT_MAX_SIZE", "FLAT_SEEN_MAX_SIZE"), 0, 1 << 40),
}


@contextlib.contextmanager
def _rule(module: Any, names: tuple[str, ...], value: int) -> Iterator[None]:
    old = {name: getattr(module, name) for name in names}
    for name in names:
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, v in old.items():
            setattr(module, name, v)


def _fragment(preset: str, x: str, y: str, shape: list[Any], k: int, observed: int | None = None) -> Any:
    """One call of ``preset``'s activation quantizer on a float32 ``x`` of ``shape`` (``observed``: the size hint)."""
    if preset == "MXINT8":
        return mx.build("mx", x, y, name=f"q{k}", opset=18, element_dtype="int8", axis=1, block_size=32,
                        rounding_mode=2, shape=shape, dtype="float32", observed=observed)
    attrs = {"BFP16": dict(bfp_method="to_bfp", bit_width=16, block_size=8),
             "MX9": dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, sub_block_size=2, sub_block_shift_bits=1),
             "MX6": dict(bfp_method="to_bfp_prime", bit_width=13, block_size=16, sub_block_size=2, sub_block_shift_bits=1)}
    return bfp.build("bfp", x, y, name=f"q{k}", opset=18, shape=shape, dtype="float32", axis=1, rounding_mode=2,
                     observed=observed, **attrs[preset])


def chain(preset: str, shape: list[int], calls: int, body: str, unknown: bool = False) -> tuple[bytes, str]:
    """The model of ``calls`` chained quantizers (``body``: "branched" or "flat") and its body's name;
    ``unknown``: the dims but axis 1 declared unknown, the size given as the hint."""
    module, name, branched, flat = RULES[preset]
    declared = [d if i == 1 else None for i, d in enumerate(shape)] if unknown else shape
    observed = int(np.prod(shape)) if unknown else None
    with _rule(module, name, branched if body == "branched" else flat):
        nodes, functions = [], {}
        for k in range(calls):
            frag = _fragment(preset, f"t{k}", "y" if k == calls - 1 else f"t{k + 1}", declared, k, observed)
            nodes += frag.nodes
            for f in frag.functions:
                functions[f.name] = f
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, declared)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("onnxptq", 1)],
                              functions=list(functions.values()))
    model.ir_version = 10
    return model.SerializeToString(), ",".join(functions)


def _special(shape: list[int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, 8, replace=False)
    flat[idx] = np.array([0.0, -0.0, 1e-40, -1e-42, np.inf, -np.inf, np.nan, 3e38], np.float32)
    return x


def _bits(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="MXINT8,BFP16,MX9")
    ap.add_argument("--shape", action="append", required=True, help="comma-separated dims (repeatable)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--runs", type=int, default=10, help="runs per round")
    ap.add_argument("--unknown", action="store_true", help="dims but axis 1 declared unknown, the size given as the hint")
    args = ap.parse_args()
    from onnxptq.sessions import open_session

    def create(data: bytes) -> tuple[Any, float]:
        t = time.process_time()
        s = open_session(data, log_severity=3, inline_functions_first=False, spinning=False, threads=1)
        return s, time.process_time() - t

    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load {open('/proc/loadavg').read().split()[0]}; "
          f"{args.calls} calls a model, {args.rounds} rounds of {args.runs} runs{'; dims unknown, size hinted' if args.unknown else ''} -->")
    print("| preset | shape | elements | µs per call branched | flat | flat ÷ branched | creation ms per call branched | flat | same bits |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for preset in args.presets.split(","):
        for spec in args.shape:
            shape = [int(d) for d in spec.split(",")]
            models = {b: chain(preset, shape, args.calls, b, args.unknown) for b in ("branched", "flat")}
            feed = {"t0": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            outs = {b: [create(m)[0].run(None, f)[0] for f in (feed, {"t0": _special(shape, 1)})]
                    for b, (m, _) in models.items()}
            same = all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(outs["branched"], outs["flat"]))
            run = {b: [] for b in models}
            made = {b: [] for b in models}
            for r in range(args.rounds):
                for b in (("branched", "flat") if r % 2 == 0 else ("flat", "branched")):
                    s, dt = create(models[b][0])
                    made[b].append(dt)
                    s.run(None, feed)
                    t = time.process_time()
                    for _ in range(args.runs):
                        s.run(None, feed)
                    run[b].append((time.process_time() - t) / args.runs / args.calls)
            ub, uf = statistics.median(run["branched"]) * 1e6, statistics.median(run["flat"]) * 1e6
            cb, cf = min(made["branched"]) * 1e3 / args.calls, min(made["flat"]) * 1e3 / args.calls
            print(f"| {preset} | {spec} | {int(np.prod(shape))} | {ub:.1f} | {uf:.1f} | {uf / ub:.2f} | {cb:.2f} | {cf:.2f} | "
                  f"{'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
