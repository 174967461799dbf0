"""Round 27's tabular family: scikit-learn models fitted on datasets scikit-learn ships, converted by skl2onnx.

No wheel in the package lists ships an skl2onnx model of a family this project lacks (round 24's pysjtu SVM is one
``ai.onnx.ml`` node), so the models are made the way a scikit-learn user makes them: fit on a public dataset that the
scikit-learn wheel carries (no download), ``skl2onnx.to_onnx`` with its defaults (classifiers end in ``ZipMap``, so the
probabilities come out as a sequence of maps, as a converted model is usually served). Each model is chosen for a
converter pattern the quantizer meets in the wild:

* ``skl_digits_mlp``: StandardScaler + MLPClassifier on the 8x8 digits (``ai.onnx.ml.Scaler`` → MatMul/Add/Relu →
  Softmax → ZipMap): the only quantizable ops sit between two ``ai.onnx.ml`` nodes.
* ``skl_cancer_pca_forest``: StandardScaler + PCA + RandomForestClassifier on breast cancer (the PCA is a Sub + MatMul
  that the quantizer can reach, the trees' ``TreeEnsembleClassifier`` compares its output against fixed thresholds).
* ``skl_wine_knn``: StandardScaler + KNeighborsClassifier on wine (skl2onnx writes the pairwise distances as a ``Scan``
  over the training rows, then TopK and a vote): the round's Scan model.

Each dataset is split once (seeded): half to fit, a quarter the calibration pool, a quarter the held-out pool; the
pools are written beside the model (``<key>.npz``) for bench/newmodels.py's feeds. Each ONNX file is checked against
scikit-learn's own ``predict``/``predict_proba`` on both pools before it is written.

    PYTHONPATH=/work/cache/newmodels27/pydeps python bench/round27_sklearn.py --out /work/cache/newmodels27/src/round27_onnx
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _split(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """Half to fit, a quarter to calibrate, a quarter held out (rows shuffled once by ``seed``)."""
    order = np.random.default_rng(seed).permutation(len(x))
    a, b = len(x) // 2, (3 * len(x)) // 4
    fit, cal, held = order[:a], order[a:b], order[b:]
    return x[fit], y[fit], x[cal], x[held], y[held]


def _models():
    """(key, dataset loader, estimator) for each model of the round."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return (
        ("skl_digits_mlp", load_digits,
         make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64, 32), max_iter=600, random_state=0))),
        ("skl_cancer_pca_forest", load_breast_cancer,
         make_pipeline(StandardScaler(), PCA(n_components=10, random_state=0),
                       RandomForestClassifier(n_estimators=60, max_depth=8, random_state=0))),
        ("skl_wine_knn", load_wine, make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5))),
    )


def build(out: Path) -> None:
    import onnxruntime as ort
    from skl2onnx import to_onnx

    out.mkdir(parents=True, exist_ok=True)
    for key, load, est in _models():
        data = load()
        x, y = data.data.astype(np.float32), data.target
        xf, yf, xc, xh, yh = _split(x, y, seed=27)
        est.fit(xf, yf)
        onx = to_onnx(est, xf[:1], target_opset={"": 17, "ai.onnx.ml": 3})
        sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
        for pool in (xc, xh):  # the converted model against scikit-learn's own answers
            labels, probs = sess.run(None, {"X": pool})
            same = float((labels == est.predict(pool)).mean())
            p = np.array([[d[c] for c in est.classes_] for d in probs], np.float64)
            gap = float(np.abs(p - est.predict_proba(pool)).max())
            print(f"{key}: labels equal to scikit-learn {same:.3f}, probabilities max diff {gap:.2e} "
                  f"({len(pool)} rows)", file=sys.stderr)
            if same < 1.0 or gap > 1e-4:
                raise RuntimeError(f"{key}: the converted model differs from scikit-learn ({same}, {gap})")
        (out / f"{key}.onnx").write_bytes(onx.SerializeToString())
        np.savez(out / f"{key}.npz", calib=xc, held=xh, held_true=yh)
        print(f"{key}: accuracy on held-out {float((est.predict(xh) == yh).mean()):.3f}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    build(ap.parse_args().out)


if __name__ == "__main__":
    main()
