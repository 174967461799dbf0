"""Where the waveform rules act on a set of ONNX files (issue 27, logaudio): per file with a ``Log``, the tensors the
log-domain walk keeps float (graph/logdomain.py), of them the waveform chain upstream of a spectrum, and the outputs
the floor reads as waveforms (analysis/waveform_reads.py). Run against an older ``src`` too (the waveform columns then
read "-") to see which models a change of the rule touches.

    PYTHONPATH=src python bench/waveform_rules.py --root /work/cache --root /work/shared/models [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import onnx

from onnxptq.graph.logdomain import log_domain_float_tensors

try:
    from onnxptq.analysis.waveform_reads import waveform_outputs
except ImportError:  # an older src: no waveform reading
    waveform_outputs = None


def rows(roots: list[Path], max_bytes: float) -> list[dict]:
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.onnx")):
            if path.stat().st_size > max_bytes:
                continue
            try:
                model = onnx.load(str(path), load_external_data=False)
            except Exception as exc:  # noqa: BLE001 - a broken or partial file in a fetched tree: said, skipped
                out.append({"file": str(path), "error": f"{type(exc).__name__}: {str(exc)[:80]}"})
                continue
            waves = sorted(waveform_outputs(model)) if waveform_outputs is not None else None
            has_log = any(n.op_type == "Log" for n in model.graph.node)
            if not has_log and not waves:
                continue
            why = log_domain_float_tensors(model) if has_log else {}
            chain = sorted(k for k, v in why.items() if "the waveform feeding its spectrum" in v)
            out.append({"file": str(path), "log_float": len(why), "waveform_chain": len(chain), "chain": chain,
                        "waveform_outputs": waves})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", action="append", type=Path, required=True)
    p.add_argument("--max-mb", type=float, default=400.0)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    found = rows(a.root, a.max_mb * 1e6)
    for r in found:
        if "error" in r:
            continue
        waves = "-" if r["waveform_outputs"] is None else ",".join(r["waveform_outputs"]) or "none"
        print(f"{r['file']}: {r['log_float']} float by the Log walk, {r['waveform_chain']} of them the waveform chain; "
              f"waveform outputs: {waves}")
    if a.json:
        a.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
