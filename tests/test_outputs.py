"""Issue 18 items 1-4: outputs never replace what is not ours; saves are atomic, mode-correct, clean."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import make_small_cnn, small_cnn_feeds
from onnxptq import outputs
from onnxptq.api import quantize
from onnxptq.cli import main as cli_main
from onnxptq.errors import OutputCollisionError, OutputFolderMissingError, OutputIsFolderError, OutputPathError, SaveError
from onnxptq.graph import io

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def data_npz(tmp_path) -> Path:
    path = tmp_path / "calib.npz"
    np.savez(path, x=np.concatenate([f["x"] for f in small_cnn_feeds(3)]))
    return path


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- 1. special files -------------------------------------------------------------------------


def test_fifo_and_device_outputs_are_refused_not_replaced(tmp_path, small_cnn_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="FIFO"):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=fifo)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    with pytest.raises(OutputPathError, match="character device"):
        io.check_output_path("/dev/null")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_symlink_output_is_written_through(tmp_path, small_cnn_path):
    target = tmp_path / "real.onnx"
    target.write_bytes(b"old")
    link = tmp_path / "link.onnx"
    link.symlink_to(target)
    quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    onnx.checker.check_model(onnx.load(str(target)))


# --- 2. every output against every input ------------------------------------------------------


def test_output_onto_the_input_models_external_data_is_refused(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save_model(make_small_cnn(), str(model), save_as_external_data=True, location="m.data", size_threshold=0)
    before = (tmp_path / "m.data").read_bytes()
    with pytest.raises(OutputCollisionError, match="external-data file.*m.data"):
        quantize(model, "A8W8", small_cnn_feeds(2), output=tmp_path / "m.data")
    assert (tmp_path / "m.data").read_bytes() == before


def test_output_onto_the_calibration_data_is_refused(tmp_path, small_cnn_path, data_npz):
    before = data_npz.read_bytes()
    with pytest.raises(OutputCollisionError, match="calibration data"):
        quantize(small_cnn_path, "A8W8", data_npz, output=data_npz)
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "0.npy", small_cnn_feeds(1)[0]["x"])
    with pytest.raises(OutputCollisionError, match="calibration data"):
        quantize(small_cnn_path, "A8W8", folder, output=folder / "0.npy")
    assert data_npz.read_bytes() == before


def test_hard_link_to_the_input_is_refused(tmp_path, small_cnn_path):
    link = tmp_path / "hard.onnx"
    os.link(small_cnn_path, link)
    with pytest.raises(OutputCollisionError, match="input model"):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=link)


def test_cli_plan_collisions_and_missing_plan_folder_fail_before_any_work(tmp_path, small_cnn_path, data_npz, capsys):
    out = tmp_path / "q.onnx"
    model_bytes = small_cnn_path.read_bytes()
    cases = [
        (["--plan", str(out)], "--plan path .* is the same file as the -o path"),
        (["--plan", str(small_cnn_path)], "--plan path .* input model"),
        (["--plan", str(data_npz)], "--plan path .* calibration data"),
        (["--plan", str(tmp_path / "nowhere" / "plan.json")], "--plan folder does not exist"),
    ]
    for extra, message in cases:
        assert cli_main(["quantize", str(small_cnn_path), "-o", str(out), "--data", str(data_npz), "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and pytest.importorskip("re").search(message, err), err
        assert not out.exists()
    assert small_cnn_path.read_bytes() == model_bytes
    plan = tmp_path / "plan.json"
    assert cli_main(["quantize", str(small_cnn_path), "-o", str(out), "--data", str(data_npz), "--no-progress", "--plan", str(plan)]) == 0
    assert json.loads(plan.read_text())


def test_report_output_cannot_replace_the_models_it_reads(tmp_path, small_cnn_path, data_npz, capsys):
    q = tmp_path / "q.onnx"
    quantize(small_cnn_path, "A8W8", data_npz, output=q)
    before = q.read_bytes()
    # report.html's JSON goes to report.json: name the quantized model q.json to collide through it
    q_json = tmp_path / "q.json"
    q_json.write_bytes(before)
    for model_path, out in ((q, q), (small_cnn_path, small_cnn_path), (q_json, tmp_path / "q.html")):
        code = cli_main(["report", str(small_cnn_path), str(model_path), "--data", str(data_npz), "-o", str(out)])
        assert code == 2
        assert "refusing to overwrite the input" in capsys.readouterr().err
    assert q.read_bytes() == before and q_json.read_bytes() == before


def test_trailing_slash_output_never_becomes_a_file(tmp_path, small_cnn_path):
    with pytest.raises(OutputIsFolderError, match="separator"):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=str(tmp_path / "newdir") + os.sep)
    assert not (tmp_path / "newdir").exists()


def test_infer_output_names_that_map_to_one_file_get_distinct_files(tmp_path):
    from onnx import TensorProto, helper

    from onnxptq.analysis.infer import run_and_save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a/b"]), helper.make_node("Neg", ["x"], ["a_b"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("a/b", TensorProto.FLOAT, [1, 2]), helper.make_tensor_value_info("a_b", TensorProto.FLOAT, [1, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    x = np.array([[1.0, -2.0]], np.float32)
    written = run_and_save(path, {"x": x}, tmp_path / "out")
    assert len(set(written)) == 2
    values = sorted(np.load(p).tolist() for p in written)
    assert values == sorted([[[1.0, 0.0]], [[-1.0, 2.0]]])


# --- 3. modes ------------------------------------------------------------------------------------


def test_new_files_follow_the_umask_and_replaced_files_keep_their_mode(tmp_path, small_cnn_path):
    old = os.umask(0o027)
    try:
        out = tmp_path / "q.onnx"
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=out)
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
        os.chmod(out, 0o604)
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=out)
        assert stat.S_IMODE(out.stat().st_mode) == 0o604
        text = outputs.write_text(tmp_path / "plan.json", "{}")
        assert stat.S_IMODE(text.stat().st_mode) == 0o640
    finally:
        os.umask(old)


# --- 4. failed saves ---------------------------------------------------------------------------


def test_disk_full_leaves_nothing_and_says_so_in_one_line(tmp_path, small_cnn, monkeypatch):
    out = tmp_path / "q.onnx"

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx, "save_model", full)
    with pytest.raises(SaveError, match=r"cannot write model .*q.onnx: No space left on device"):
        io.save_model(small_cnn, out)
    assert _listing(tmp_path) == []


def test_sigterm_during_save_removes_the_temporary_file(tmp_path):
    """A child process saves a model whose write blocks; SIGTERM arrives mid-save."""
    script = textwrap.dedent(
        f"""
        import sys, time, onnx
        sys.path.insert(0, {SRC!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import make_small_cnn
        from onnxptq.graph import io
        def slow(model, path, *a, **k):
            open(path, "wb").write(b"partial")
            print("writing", flush=True)
            time.sleep(30)
        onnx.save_model = slow
        io.save_model(make_small_cnn(), {str(tmp_path / "q.onnx")!r})
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=20)
    assert child.returncode == -signal.SIGTERM
    assert _listing(tmp_path) == []


def test_missing_folder_error_is_raised_before_calibration(tmp_path, small_cnn_path, monkeypatch):
    from onnxptq import api

    monkeypatch.setattr(api, "calibrate_once", lambda *a, **k: pytest.fail("calibrated before checking the output"))
    with pytest.raises(OutputFolderMissingError):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(2), output=tmp_path / "missing" / "q.onnx")
