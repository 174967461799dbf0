"""evaluate: metrics against hand-computed values for .npy, .png and .jpg; pairing errors; both CLI forms."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from onnxptq import cli
from onnxptq.analysis.metrics import (
    EmptyFolderError,
    MissingFileError,
    ShapeMismatchError,
    compare_folders,
    cosine_similarity,
    l2_loss,
    load_image,
    psnr,
)
from onnxptq.tools import evaluate as evaluate_tool

PIL = pytest.importorskip("PIL.Image")


def test_metric_definitions_by_hand():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])
    # cos = (1 + 4 + 12) / (sqrt(14) sqrt(21)); L2 = |(0, 0, -1)| = 1;
    # PSNR: mse = 1/3, peak = max(a) = 3 -> 20 log10 3 + 10 log10 3 = 30 log10 3
    assert cosine_similarity(a, b) == pytest.approx(17 / math.sqrt(14 * 21), rel=1e-12)
    assert l2_loss(a, b) == pytest.approx(1.0)
    assert psnr(a, b) == pytest.approx(30 * math.log10(3), rel=1e-12)
    # identical arrays: mse -> 1e-10; non-positive peak -> 1e-10
    assert psnr(a, a) == math.inf  # identical: infinite, whatever the peak (issue 18)
    assert psnr(np.zeros(4), np.zeros(4)) == math.inf
    assert psnr(-a, -b) == pytest.approx(-200 - 10 * math.log10(1 / 3))
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine_similarity(np.zeros(3), a) == 0.0


def _write_pair(base, quant, name, x, y):
    base.mkdir(exist_ok=True)
    quant.mkdir(exist_ok=True)
    np.save(base / name, x)
    np.save(quant / name, y)


def test_npy_folders(tmp_path):
    base, quant = tmp_path / "a", tmp_path / "b"
    _write_pair(base, quant, "0.npy", np.array([[1.0, 2.0, 3.0]], np.float32), np.array([[1.0, 2.0, 4.0]], np.float32))
    _write_pair(base, quant, "1.npy", np.array([3.0, 4.0], np.float32), np.array([3.0, 4.0], np.float32))
    result = compare_folders(base, quant)
    assert [p.name for p in result.pairs] == ["0.npy", "1.npy"]
    cos0 = 17 / math.sqrt(14 * 21)
    assert result.mean_cosine == pytest.approx((cos0 + 1.0) / 2)
    assert result.min_cosine == pytest.approx(cos0)
    assert result.mean_l2 == pytest.approx(0.5) and result.max_l2 == pytest.approx(1.0)
    assert result.pairs[1].psnr == math.inf
    assert result.mean_psnr == pytest.approx(30 * math.log10(3))  # identical pairs left out of the mean
    assert result.min_psnr == pytest.approx(30 * math.log10(3))


def test_png_by_hand(tmp_path):
    base, quant = tmp_path / "a", tmp_path / "b"
    base.mkdir()
    quant.mkdir()
    ref = np.zeros((2, 2, 3), np.uint8)
    ref[0, 0] = [200, 100, 50]
    out = ref.copy()
    out[0, 0, 0] = 190  # one value off by 10
    PIL.fromarray(ref).save(base / "img.png")
    PIL.fromarray(out).save(quant / "img.png")
    pair = compare_folders(base, quant).pairs[0]
    # 12 values; diff vector has one 10: L2 = 10, mse = 100/12, peak = 200
    assert pair.l2 == pytest.approx(10.0)
    assert pair.psnr == pytest.approx(20 * math.log10(200) - 10 * math.log10(100 / 12))
    dot = 200 * 190 + 100 * 100 + 50 * 50
    assert pair.cosine == pytest.approx(dot / math.sqrt((200**2 + 100**2 + 50**2) * (190**2 + 100**2 + 50**2)))


def test_jpg_by_hand(tmp_path):
    # flat grey images survive JPEG exactly (only the DC term is coded), so values are known
    base, quant = tmp_path / "a", tmp_path / "b"
    base.mkdir()
    quant.mkdir()
    PIL.fromarray(np.full((16, 16, 3), 128, np.uint8)).save(base / "img.jpg", quality=100)
    PIL.fromarray(np.full((16, 16, 3), 130, np.uint8)).save(quant / "img.jpg", quality=100)
    assert (load_image(base / "img.jpg") == 128).all() and (load_image(quant / "img.jpg") == 130).all()
    pair = compare_folders(base, quant).pairs[0]
    n = 16 * 16 * 3
    assert pair.cosine == pytest.approx(1.0)
    assert pair.l2 == pytest.approx(2 * math.sqrt(n))
    assert pair.psnr == pytest.approx(20 * math.log10(128) - 10 * math.log10(4))


def test_errors_name_the_fault(tmp_path):
    base, quant = tmp_path / "a", tmp_path / "b"
    _write_pair(base, quant, "0.npy", np.zeros(3), np.zeros(3))
    np.save(base / "1.npy", np.zeros(3))
    with pytest.raises(MissingFileError, match="1.npy"):
        compare_folders(base, quant)
    np.save(quant / "1.npy", np.zeros(4))
    with pytest.raises(ShapeMismatchError, match=r"1.npy.*\(3,\).*\(4,\)"):
        compare_folders(base, quant)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    with pytest.raises(EmptyFolderError, match="empty"):
        compare_folders(empty, quant)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        compare_folders(tmp_path / "nowhere", quant)


def test_missing_pillow_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "x.png").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"pip install onnxptq\[images\]"):
        load_image(tmp_path / "x.png")


def test_cli_forms(tmp_path, capsys):
    base, quant = tmp_path / "a", tmp_path / "b"
    _write_pair(base, quant, "0.npy", np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert evaluate_tool.main([str(base), str(quant)]) == 0
    positional = capsys.readouterr().out
    assert "Mean cos similarity: 0.991460" in positional and "Mean l2 loss: 1" in positional
    assert evaluate_tool.main(["--baseline_results_folder", str(base), "--quantized_results_folder", str(quant)]) == 0
    assert capsys.readouterr().out == positional
    assert cli.main(["evaluate", str(base), str(quant), "--per_file"]) == 0
    assert "0.npy: cos similarity" in capsys.readouterr().out
    np.save(base / "1.npy", np.zeros(2))
    assert evaluate_tool.main([str(base), str(quant)]) == 2
    assert "1.npy" in capsys.readouterr().err
    assert cli.main(["evaluate", str(base), str(quant)]) == 2
