"""The plan scans' shared loop: every zoo and outside model, planned per preset by a script's ``check``.

Why: bench/gain_vectors_check.py and bench/short_blocks_reach.py each ask "where does a plan rule
change anything" over the same models with the same rows (model, preset, what changed, CPU s);
this is their one model list and one loop, each script keeping only its ``check``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Callable


def models() -> dict[str, Path]:
    """Every zoo model and every outside model whose file is here."""
    from testkit import zoo

    import newmodels  # bench/newmodels.py

    out: dict[str, Path] = {}
    for m in zoo.ZOO:
        try:
            out[f"zoo:{m.name}"] = m.path()
        except Exception as exc:  # noqa: BLE001 - a wheel missing here is listed, not fatal
            logging.warning("zoo %s: %s", m.name, exc)
    for name, (rel, *_rest) in newmodels.MODELS.items():
        path = newmodels.SRC / rel
        if path.is_file():
            out[f"new:{name}"] = path
    return out


def scan_main(description: str, check: Callable[[Path, str], dict], default_presets: str,
              printable: Callable[[dict], dict] = lambda row: row, quiet: bool = False) -> None:
    """Parse ``--json --presets --only``, run ``check(path, preset)`` over every model, write the rows
    (JSON, rewritten after each) and print ``printable(row)`` per row; an exception is a row too."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--json", required=True)
    ap.add_argument("--presets", default=default_presets)
    ap.add_argument("--only", default="", help="comma-separated model keys (zoo:NAME, new:NAME); default all")
    a = ap.parse_args()
    if quiet:
        logging.disable(logging.WARNING)
    rows = []
    todo = models()
    if a.only:
        todo = {k: v for k, v in todo.items() if k in a.only.split(",")}
    for key, path in todo.items():
        for preset in a.presets.split(","):
            t0 = time.process_time()
            try:
                row = {"model": key, "preset": preset, **check(path, preset)}
            except Exception as exc:  # noqa: BLE001 - recorded
                row = {"model": key, "preset": preset, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            row["cpu_s"] = round(time.process_time() - t0, 1)
            rows.append(row)
            print(json.dumps(printable(row)), flush=True)
            Path(a.json).write_text(json.dumps(rows, indent=1))
