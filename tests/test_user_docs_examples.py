"""Every Python example of the user documents that builds a config, run with only the import changed.

The code blocks are read from the .rst files themselves, so a new example is picked up without
editing this file. ``quark.onnx`` becomes ``onnxptq``; the documents' placeholders (model and
output paths, the data reader, the tensor names of the tensor-wise example) are filled with the
PP-OCR cls model, a temporary output and a few random samples in its input range. Fragments that
only build ``quant_config`` are quantized with the documents' own ModelQuantizer lines. Each output
must load in a plain onnxruntime CPU session with nothing registered.

Examples that need a feature not built yet must raise NotImplementedError naming it; they are
strict xfails, so the day the feature lands this file says so. FastFinetune examples run with
their NumIterations capped (the documents ask for 1000 per layer), so the whole path is exercised
in seconds; they need torch and skip without it.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from testkit.models import model_path

pytestmark = pytest.mark.slow

#: The user documents live in ../shared beside the checkout (as on CI).
USER_DOCS = Path(__file__).resolve().parents[2] / "shared" / "spec" / "user-docs"
MODEL = model_path("cls")

#: Features the examples use that raise NotImplementedError until they are built.
UNBUILT: tuple[str, ...] = ()
#: NumIterations the FastFinetune examples run with here.
FINETUNE_ITERATIONS = 3
#: The tensor-wise example's placeholder names -> tensors of the cls model that survive preparation.
TENSOR_NAMES = {
    "weight_tensor_name1": "conv2_se_1_weights",
    "weight_tensor_name2": "conv2_se_2_weights",
    "weight_tensor_name": "conv2_se_1_weights",
    "activation_tensor_name1": "hardswish_0.tmp_0",
    "activation_tensor_name2": "relu_0.tmp_0",
    "activation_tensor_name": "hardswish_0.tmp_0",
}


def _code_blocks(text: str) -> list[str]:
    """The bodies of ``.. code-block:: python`` / ``.. code:: python`` directives, dedented."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if re.match(r"\s*\.\. code(-block)?::\s*python\s*$", lines[i]):
            indent = len(lines[i]) - len(lines[i].lstrip())
            body = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                body.append(lines[i])
                i += 1
            blocks.append(_fix_indent(textwrap.dedent("\n".join(body)).strip("\n")))
            continue
        i += 1
    return blocks


def _fix_indent(code: str) -> str:
    """Repair the one defect of the documents' own code: the A8W8 example indents its first three
    lines by 3 spaces and the rest by 4, which is an IndentationError in the original too. When a
    block does not compile and every indented line sits one space past a multiple of 4, drop it."""
    try:
        compile(code, "<doc>", "exec")
        return code
    except IndentationError:
        pass
    indents = {len(l) - len(l.lstrip()) for l in code.splitlines() if l.strip()} - {0}
    if indents and all(i % 4 == 1 for i in indents):
        return "\n".join(l[1:] if l.startswith(" ") else l for l in code.splitlines())
    return code


def _examples() -> list:
    if not USER_DOCS.is_dir():
        return []
    params = []
    for doc in sorted(USER_DOCS.glob("*.rst")):
        text = doc.read_text(encoding="utf-8", errors="replace")
        # Fragments rely on the document's earlier imports: collect them all, onnxruntime's included.
        imports = "\n".join(sorted(set(re.findall(r"^\s*(from (?:quark\.onnx|onnxruntime)[\w.]* import [^\n]+)", text, re.M))))
        for n, code in enumerate(_code_blocks(text)):
            if not any(k in code for k in ("QuantizationConfig(", "get_default_config(", "register_custom_ops_library")):
                continue
            unbuilt = next((k for k in UNBUILT if k in code), None)
            marks = [pytest.mark.xfail(raises=NotImplementedError, strict=True, reason=f"{unbuilt} not built yet")] if unbuilt else []
            params.append(pytest.param(imports, code, unbuilt, id=f"{doc.stem}-{n}", marks=marks))
    return params


def _samples(n: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32) for _ in range(n)]


class _Reader:
    """The documents' ``data_reader``: an object with get_next()."""

    def __init__(self) -> None:
        self._it = iter([{"x": s} for s in _samples()])

    def get_next(self):
        return next(self._it, None)


def _cap_finetune(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the refine step with FINETUNE_ITERATIONS iterations per layer, the rest as configured."""
    pytest.importorskip("torch")
    import dataclasses

    from onnxptq.pipeline.refine import finetune

    real = finetune.refine

    def capped(prepared, plan, params, samples, options, **kw):
        return real(prepared, plan, params, samples, dataclasses.replace(options, num_iterations=FINETUNE_ITERATIONS), **kw)

    monkeypatch.setattr(finetune, "refine", capped)


def _port(code: str) -> str:
    """Change the import, and fill the placeholders of the A8W8 and tensor-wise examples."""
    code = code.replace("quark.onnx", "onnxptq")
    code = code.replace('"path/to/float_model.onnx"', "input_model_path")
    code = code.replace('"path/to/quantized_model.onnx"', "output_model_path")
    code = code.replace("'model_input_name'", "'x'")
    code = code.replace("processed_data = []", "processed_data = list(__samples__)")
    for placeholder, name in TENSOR_NAMES.items():
        code = code.replace(f"'{placeholder}'", repr(name))
    return code


@pytest.mark.skipif(not (USER_DOCS.is_dir() and MODEL.exists()), reason="user documents or cls model not available")
@pytest.mark.parametrize("imports, code, unbuilt", _examples())
def test_user_doc_example_runs(tmp_path, monkeypatch, imports, code, unbuilt):
    output = tmp_path / "quantized.onnx"
    if "FastFinetune" in code or "include_fast_ft=True" in code:
        _cap_finetune(monkeypatch)
    ns: dict = {
        "input_model_path": str(MODEL),
        "output_model_path": str(output),
        "data_reader": _Reader(),
        "onnx_model_path": str(MODEL),
        "__samples__": _samples(),
    }
    exec(_port(imports), ns)  # noqa: S102 - the documents' own imports, ported
    exec(_port(code), ns)  # noqa: S102 - the documents' own example, ported
    if "register_custom_ops_library" in code:
        session = ns["session"]
    else:
        if "quantize_model(" not in code:
            # A fragment that only builds quant_config: finish it with the documents' own lines.
            quantizer = ns["ModelQuantizer"](ns["Config"](global_quant_config=ns["quant_config"]))
            quantizer.quantize_model(str(MODEL), str(output), _Reader())
        assert output.exists()
        session = onnxruntime.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    probs = session.run(None, {"x": _samples(1)[0]})[0]
    assert probs.shape == (1, 2) and np.isfinite(probs).all()
