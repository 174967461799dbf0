"""The package's layout holds: no import cycle, layers in order, every package says what it holds,
public names import.

The import graph is read from the source with ``ast`` (function-level imports included: a lazy
import that closes a cycle is still a cycle in the design; ``importlib.import_module("...")`` with a
literal name counts as an import too), so a cycle or an import of a later layer fails here, naming
its modules, before it can surface as an ImportError in some import order.
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
    return {name: module_deps(name, is_package, path.read_text(encoding="utf-8"), modules)
            for name, (path, is_package) in modules.items()}


def module_deps(name: str, is_package: bool, source: str, modules: dict | set) -> set[str]:
    """The package modules that module ``name`` (source ``source``) imports: import statements and
    ``importlib.import_module`` calls with a literal name (a computed name cannot be read here)."""
    base = name.split(".") if is_package else name.split(".")[:-1]
    deps: set[str] = set()
    for node in ast.walk(ast.parse(source)):
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
        elif (isinstance(node, ast.Call) and _is_import_module(node.func) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            target = node.args[0].value
            if target.startswith("."):  # relative to the package named by the second argument
                level = len(target) - len(target.lstrip("."))
                rest = target.lstrip(".")
                target = ".".join(base[: len(base) - (level - 1)] + ([rest] if rest else []))
            while target and target not in modules:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target:
                deps.add(target)
    deps.discard(name)
    return deps


def _is_import_module(func: ast.expr) -> bool:
    """``importlib.import_module`` or a bare ``import_module`` (``from importlib import import_module``)."""
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")


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


#: The floors of the house, bottom first. A module may import its own floor and the floors below,
#: never one above: formats (the NumPy truth) at the bottom, their ONNX form over them, graph
#: machinery, the calibration runner, the measurements, the pipeline's stages, the searches and
#: whole-model tools built on them, the entry point, the compatible surfaces, the command lines.
#: Each entry names top-level modules or packages of ``onnxptq`` ("" is the package's own
#: ``__init__``, the public names).
LAYERS: list[tuple[str, ...]] = [
    ("errors", "memory", "deferred"),  # memory: hands freed heap back to the OS between stages; deferred: sympy
    # imported on first use (neither imports onnxptq)
    ("outputs",),
    ("formats",),
    ("config",),
    ("graph",),
    ("onnx_ops",),
    ("sessions",),
    ("calibration",),
    ("analysis",),
    ("pipeline", "weight_only"),  # weight_only: the second, lighter pipeline (LLM weights)
    ("algorithms", "conversion"),
    ("api",),
    ("compat",),
    ("quantization",),
    ("commands", "tools", "cli", "__main__", ""),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``onnxptq.<top>...``; a KeyError for a module no floor holds."""
    top = module.split(".")[1] if "." in module else ""
    for index, floor in enumerate(LAYERS):
        if top in floor:
            return index
    raise KeyError(f"{module}: its top-level name {top!r} is on no floor of LAYERS (tests/test_house.py): add it")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a later floor, as 'importer (floor) -> imported (floor)'."""
    found = []
    for name, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if layer_of(dep) > layer_of(name):
                found.append(f"{name} ({LAYERS[layer_of(name)][0]}) -> {dep} ({LAYERS[layer_of(dep)][0]})")
    return found


def test_the_layer_check_finds_an_upward_import():
    assert upward_imports({"onnxptq.formats.base": {"onnxptq.graph.io"}, "onnxptq.graph.io": set()}) == [
        "onnxptq.formats.base (formats) -> onnxptq.graph.io (graph)"]
    assert upward_imports({"onnxptq.api": {"onnxptq.pipeline.plan"}, "onnxptq.pipeline.plan": set()}) == []


def test_import_module_strings_count_as_imports():
    modules = {"onnxptq.formats", "onnxptq.formats.base", "onnxptq.graph", "onnxptq.graph.io"}
    source = ('import importlib\nfrom importlib import import_module\n'
              'def f(family):\n'
              '    importlib.import_module("onnxptq.graph.io")\n'
              '    import_module(".base", __package__)\n'
              '    importlib.import_module(f"onnxptq.graph.{family}")\n')  # computed: not readable
    assert module_deps("onnxptq.formats", True, source, modules) == {"onnxptq.graph.io", "onnxptq.formats.base"}


def test_every_module_is_on_a_floor():
    for name in import_graph():
        layer_of(name)  # raises naming the module and its top-level name


def test_no_module_imports_a_later_layer():
    assert upward_imports(import_graph()) == []


def test_the_plan_package_has_small_modules():
    """The planner is a package of modules with one job each (types, select, assign, rules), none of
    which grows back into the 950-line module it was."""
    files = sorted((PACKAGE_DIR / "pipeline" / "plan").glob("*.py"))
    assert {f.stem for f in files} >= {"__init__", "types", "select", "assign", "rules"}
    for f in files:
        lines = len(f.read_text(encoding="utf-8").splitlines())
        assert lines <= 350, f"pipeline/plan/{f.name} has {lines} lines (at most 350)"


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
    from onnxptq.formats import fake_quantize  # noqa: F401
    from onnxptq.onnx_ops import build_qdq, qdq_model  # noqa: F401
    from onnxptq.pipeline.prepare import prepare  # noqa: F401
    from onnxptq.quantization.api import ModelQuantizer  # noqa: F401
    from onnxptq.quantization.config import Config, QuantizationConfig, get_default_config as g2  # noqa: F401
    from onnxptq.tools import convert_fp16_to_bf16, convert_fp32_to_bf16, evaluate  # noqa: F401
