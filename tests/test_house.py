"""The package's layout holds: no import cycle, every package says what it holds, public names import.

The import graph is read from the source with ``ast`` (function-level imports included: a lazy
import that closes a cycle is still a cycle in the design), so a cycle fails here, naming its
modules, before it can surface as an ImportError in some import order.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import onnxptq

PACKAGE_DIR = Path(onnxptq.__file__).resolve().parent


def _modules() -> dict[str, tuple[Path, bool]]:
    modules = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports. ``from pkg import sub`` depends on ``pkg.sub``
    when ``sub`` is a module (Python imports ``pkg`` first, but ``pkg`` is the importer's own
    parent package, already imported); otherwise on ``pkg`` itself."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        base = name.split(".") if is_package else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base[: len(base) - (node.level - 1)]
                    target = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:
                        deps.add(sub)
                    elif target in modules:
                        deps.add(target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_package_modules():
    graph = import_graph()
    assert "onnxptq.pipeline.plan" in graph and "onnxptq.api" in graph  # the walk saw the package
    assert cycles(graph) == []


def test_algorithms_and_pipeline_never_import_the_entry_point():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith(("onnxptq.pipeline", "onnxptq.algorithms", "onnxptq.calibration", "onnxptq.formats")):
            assert "onnxptq.api" not in deps, name


def test_collectors_know_nothing_of_methods():
    assert "onnxptq.calibration.methods" not in import_graph()["onnxptq.calibration.collectors"]


def test_every_package_says_what_it_holds():
    for name, (path, is_package) in _modules().items():
        if is_package:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            assert doc and len(doc.split()) >= 8, f"{name}/__init__.py needs a docstring saying what the package holds"


PUBLIC_NAMES = [
    "quantize", "QuantizationResult", "get_preset", "preset_names", "QuantConfig", "TensorQuant", "CalibrationOptions",
    "auto_mixed_precision", "L2Target", "Top1Target", "AutoMixedPrecisionOptions", "ModelQuantizer", "Config",
    "QuantizationConfig", "QuantType", "QuantFormat", "CalibrationMethod", "CalibrationDataReader", "ExtendedQuantType",
    "ExtendedQuantFormat", "VitisQuantType", "VitisQuantFormat", "PowerOfTwoMethod", "Int16Method", "LayerWiseMethod",
    "ExtendedCalibrationMethod", "RandomDataReader", "get_library_path",
]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_names_import(name):
    assert getattr(onnxptq, name) is not None


def test_old_module_paths_are_gone():
    # One alias mechanism only (quantization/, the reference tool's mirror): the pre-layout module
    # paths (onnxptq.plan, onnxptq.bf16, ...) and the stages re-exported by api.py no longer import.
    for old in ("onnxptq.plan", "onnxptq.solve", "onnxptq.emit", "onnxptq.bf16", "onnxptq.fp16", "onnxptq.evaluate",
                "onnxptq.metrics", "onnxptq.report", "onnxptq.infer", "onnxptq._moved"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    import onnxptq.api
    import onnxptq.graph.passes

    assert onnxptq.api.__all__ == ["quantize"] and not hasattr(onnxptq.api, "build_model")
    assert not hasattr(onnxptq.graph.passes, "prepare")


def test_documented_module_paths_import():
    from onnxptq.api import quantize  # noqa: F401
    from onnxptq.pipeline.build import build_model  # noqa: F401  (bench/ and docs use them)
    from onnxptq.pipeline.calibrate import calibrate_once  # noqa: F401
    from onnxptq.pipeline.complete import complete  # noqa: F401
    from onnxptq.compat import get_default_config  # noqa: F401
    from onnxptq.formats import build_qdq, fake_quantize, qdq_model  # noqa: F401
    from onnxptq.pipeline.prepare import prepare  # noqa: F401
    from onnxptq.quantization.api import ModelQuantizer  # noqa: F401
    from onnxptq.quantization.config import Config, QuantizationConfig, get_default_config as g2  # noqa: F401
    from onnxptq.tools import convert_fp16_to_bf16, convert_fp32_to_bf16, evaluate  # noqa: F401
