"""Where finish's onnxruntime session creation goes, phase by phase, on a block-format model (issue 26 item 1).

``python bench/session_phases.py MODEL PRESET[,PRESET...]`` quantizes ``MODEL`` (as
bench/quantize_stages.py reads it: ``cls``/``rec``/``det``, a zoo name or ``new:<name>``; no repair)
with each preset, packed (the delivered file) and, with ``--unpacked``, ``pack_weights=False``, and
for each file

* times ``--rounds`` creations (best of) of a session opened as finish opens it (level all, functions
  inlined after level 1, finish's thread count, no spinning): **create s**;
* opens it once more with onnxruntime's verbose log and splits that creation at the log's own
  markers: **load** (parsing, the graph built), **level 1** (the basic optimisers on the outer graph,
  before inlining; of which **folding**: ConstantFolding's own work, i.e. computing packed weights'
  decoding chains, without the graph resolve after it), **inline** (partitioning, where the
  quantizer functions are inlined), **levels 2-3** (the extended and layout optimisers on the
  inlined graph), **finalize** (kernels, allocation plans and initializers of the main graph and of
  every ``If`` branch); and counts **resolves** (optimiser passes that changed the graph: onnxruntime
  then resolves the whole graph again, types and shapes of every node) and the **nodes** placed
  after inlining, the **subgraphs** given their own session state (the bodies' ``If`` branches).

The verbose log costs time of its own (here ~1.3-2x), so its phases are printed as shares of that
creation and as those shares of the plain (best) creation time: what each phase costs, roughly.

Why: the previous rounds (bench/RESULTS.md, blockquant10-12) found finish's one session creation the
largest part of a block format's extra quantize time on conv models and ~40 us per inlined node,
but not which phase of it; a phase points at the lane that can cut it (the packed weights'
decoding chains fold in level 1; the bodies' node count in levels 2-3 and finalize).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/session_phases.py rec BF16,BFP16,MX9,MXINT8,MXFP8_E4M3 --unpacked
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import dataclasses
import datetime
import os
import re
import tempfile
import time
from typing import Any

#: a line of onnxruntime's default logger: timestamp, severity, message
LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) \[(\w):onnxruntime:[^\]]*\] (.*)")


@dataclasses.dataclass
class Phases:
    """One verbose creation split at the log's markers (seconds of that creation)."""

    total: float = 0.0
    load: float = 0.0
    level1: float = 0.0
    folding: float = 0.0
    inline: float = 0.0
    levels23: float = 0.0
    finalize: float = 0.0
    resolves: dict[str, int] = dataclasses.field(default_factory=dict)
    nodes: int = 0
    subgraphs: int = 0


def parse(lines: list[str]) -> Phases:
    """The phases of one session creation from onnxruntime's verbose log ``lines``.

    A phase is the time between the first line of its marker and the first of the next one's; a
    marker the log lacks (no level-2 optimiser registered, say) gives its phase zero."""
    stamps, msgs = [], []
    for line in lines:
        m = LINE.match(line)
        if m is None:
            continue
        stamps.append(datetime.datetime.strptime(m.group(1)[:26], "%Y-%m-%d %H:%M:%S.%f"))
        msgs.append(m.group(3))
    if not msgs:
        raise ValueError("no onnxruntime log line found: was the log captured at verbose severity?")

    def first(text: str, start: int = 0) -> int | None:
        return next((i for i in range(start, len(msgs)) if text in msgs[i]), None)

    def span(a: int | None, b: int | None) -> float:
        return 0.0 if a is None or b is None or b < a else (stamps[b] - stamps[a]).total_seconds()

    end = len(msgs) - 1
    init = first("Initializing session")
    l1 = first("for level 1")
    l1_end = first("level 1 after step") or first("No graph transformers registered for level 2")
    l2 = first("for level 2")
    placed = first("All nodes placed")
    out = Phases(total=span(0, end), nodes=int(m.group(1)) if placed is not None and (m := re.search(r"Number of nodes: (\d+)", msgs[placed])) else 0)
    out.load = span(0, init if init is not None else l1)
    out.level1 = span(l1, l1_end)
    out.inline = span(l1_end, l2)
    out.levels23 = span(l2, placed)
    out.finalize = span(placed, end)
    level = "?"
    for i, msg in enumerate(msgs):
        if (m := re.search(r"for level (\d+)", msg)) and "Applying" in msg:
            level = m.group(1)
        if "Applying graph transformer ConstantFolding" in msg:
            done = first("GraphTransformer ConstantFolding modified", i)
            out.folding += span(i, done)
        if "modified: 1" in msg:
            out.resolves[level] = out.resolves.get(level, 0) + 1
    out.subgraphs = sum(1 for msg in msgs if "Saving initialized tensors" in msg)
    return out


def _options() -> dict[str, Any]:
    from onnxptq.pipeline import finish

    return dict(finish._options(), log_severity=3)  # finish's own arguments, quiet


def create_seconds(data: bytes, rounds: int) -> float:
    """Best CPU seconds of ``rounds`` creations opened as finish opens them."""
    from onnxptq.sessions import open_session

    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        session = open_session(data, **_options())
        best = min(best, time.process_time() - t)
        del session
    return best


def verbose_phases(data: bytes) -> Phases:
    """One creation with onnxruntime's verbose log on (captured from file descriptor 2), parsed."""
    import onnxruntime as ort

    from onnxptq.sessions import CPU, session_options

    options = session_options(**_options())
    options.log_severity_level = 0
    options.log_verbosity_level = 0
    with tempfile.TemporaryFile(mode="w+") as log_file:
        saved = os.dup(2)
        os.dup2(log_file.fileno(), 2)
        try:
            session = ort.InferenceSession(data, options, providers=list(CPU))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        del session
        log_file.seek(0)
        return parse(log_file.read().splitlines())


def measure(model: str, presets: list[str], samples: int, rounds: int, unpacked: bool) -> None:
    from block_session_cost import quantized_files

    print(f"## {model}: finish's session creation by phase (create: CPU s, best of {rounds}; phases: shares of one "
          "verbose creation, in s of the best)")
    print("| preset | weights | create s | nodes | subgraphs | load | level 1 (folding) | inline | levels 2-3 | finalize "
          "| resolves L1/L2/L3 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for preset, packed, quantized, _ in quantized_files(model, presets, samples, (True, False) if unpacked else (True,)):
        blob = quantized.SerializeToString()
        best = create_seconds(blob, rounds)
        ph = verbose_phases(blob)
        k = best / ph.total if ph.total else 0.0
        res = "/".join(str(ph.resolves.get(level, 0)) for level in ("1", "2", "3"))
        print(f"| {preset} | {'packed' if packed else 'unpacked'} | {best:.3f} | {ph.nodes} | {ph.subgraphs} | "
              f"{ph.load * k:.3f} | {ph.level1 * k:.3f} ({ph.folding * k:.3f}) | {ph.inline * k:.3f} | "
              f"{ph.levels23 * k:.3f} | {ph.finalize * k:.3f} | {res} |", flush=True)


def main() -> None:
    from block_session_cost import parser

    ap = parser(__doc__)
    ap.add_argument("--unpacked", action="store_true", help="also the pack_weights=False file of each preset")
    args = ap.parse_args()
    measure(args.model, args.presets.split(","), args.samples, args.rounds, args.unpacked)


if __name__ == "__main__":
    main()
