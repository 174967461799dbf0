"""How often the floor's two looks (analysis/evidence.py, "Two looks") confirm a model exactly at the floor, exactly.

For each (first-look units ``n1``, second-look units ``n2`` = 2, 4 or 8 × ``n1``, floor) the chance that a model
keeping each unit with probability ``floor`` is confirmed, summed over both looks' binomial counts (no sampling):
one Wilson bound at 90 % on ``n2`` units, two looks at 90 % each, and the levels the floor uses (95 % then 92 %).

    PYTHONPATH=src:. nice python bench/two_looks_error.py
"""

from __future__ import annotations

import math

import numpy as np

from onnxptq.analysis.evidence import CONFIDENT, FIRST_LOOK, SECOND_LOOK, share_bound


def _binomial(n: int, p: float) -> np.ndarray:
    return np.array([math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
                              + (n - k) * math.log1p(-p)) for k in range(n + 1)])


def confirms(n1: int, n2: int, floor: float, first: float, second: float) -> float:
    """The chance a first look on ``n1`` units at ``first`` or, failing it, a second on ``n2`` at ``second`` confirms."""
    p1, more = _binomial(n1, floor), _binomial(n2 - n1, floor)
    one = np.array([share_bound(k, n1, first)[0] >= floor for k in range(n1 + 1)])
    two = np.array([share_bound(k, n2, second)[0] >= floor for k in range(n2 + 1)], np.float64)
    later = np.array([more @ two[k:k + n2 - n1 + 1] for k in range(n1 + 1)])
    return float(p1 @ np.where(one, 1.0, later))


def main() -> None:
    schemes = {"one bound at 90 % on n2": None, "two looks at 90 %": (CONFIDENT, CONFIDENT),
               f"two looks at {FIRST_LOOK:.0%} / {SECOND_LOOK:.0%}": (FIRST_LOOK, SECOND_LOOK)}
    found: dict[str, list[float]] = {k: [] for k in schemes}
    for floor in (0.95, 0.97):
        for n1 in (20, 32, 50, 64, 80, 100, 150, 200, 300):
            for ratio in (2, 4, 8):
                n2 = n1 * ratio
                if n2 > 1000:
                    continue
                for name, levels in schemes.items():
                    found[name].append(confirms(n2, n2, floor, CONFIDENT, CONFIDENT) if levels is None
                                       else confirms(n1, n2, floor, *levels))
    print("| scheme | cases | chance to confirm a model at the floor: max | mean |")
    print("|---|---|---|---|")
    for name, values in found.items():
        print(f"| {name} | {len(values)} | {max(values):.3f} | {np.mean(values):.3f} |")


if __name__ == "__main__":
    main()
