"""What the streamed judgement costs (pipeline/streamed.py): CPU s of the held-out runs, call by call as before
and streamed, on one quantized model, in one process (side by side, so the load falls on both alike).

    NEWMODELS21_SRC=/work/cache/newmodels21/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/stream_cost.py --model fastenhancer --preset A8W8 --calib 189 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    import onnxptq
    from onnxptq.graph.walk import compared_outputs
    from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, calibrate_once
    from onnxptq.pipeline.streamed import held_out_outputs, judged_stream
    from onnxptq.sessions import open_session, run_feeds

    import newmodels as nm

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--calib", type=int, default=189)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rel, make, _, _ = nm.MODELS[a.model]
    path = str(nm.SRC / rel)
    feeds = make(a.calib, 1)
    result = onnxptq.quantize(path, a.preset, data=list(feeds))
    c0 = time.process_time()
    calibrated = calibrate_once(path, result.config, list(feeds), holdout=DEFAULT_HOLDOUT)
    stream = judged_stream(calibrated)
    print(f"calibrate_once + stream found: {time.process_time() - c0:.2f} CPU s; stream: "
          f"{stream[0].describe() if stream else None}; held-out {len(calibrated.holdout)}")
    session = open_session(result.model)
    names = compared_outputs(calibrated.prepared.graph)
    first = calibrated.holdout[:DEFAULT_HOLDOUT]
    times: dict[str, list[float]] = {"8 held-out calls, call by call (before)": [], "all held-out calls, call by call": [],
                                     "all held-out calls, streamed (now)": []}
    for _ in range(a.rounds):
        for label, run in (("8 held-out calls, call by call (before)", lambda: run_feeds(session, names, first)),
                           ("all held-out calls, call by call", lambda: run_feeds(session, names, calibrated.holdout)),
                           ("all held-out calls, streamed (now)", lambda: held_out_outputs(session, names, calibrated))):
            t0 = time.process_time()
            run()
            times[label].append(time.process_time() - t0)
    for label, ts in times.items():
        print(f"{label}: median {statistics.median(ts) * 1000:.1f} CPU ms over {a.rounds} rounds")


if __name__ == "__main__":
    main()
