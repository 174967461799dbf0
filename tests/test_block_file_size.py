"""Block-format files (issue 26 item 2): shared function definitions, lifted constants, packed
sub-byte fields without tables. The delivered file must be small (MXINT8 ≤ 0.30×, MXFP4 ≤ 0.20× the
fp32 file where weights dominate) and compute what the old form computed, bit for bit: one
definition per specialised body, fp32 weights (``pack_weights=False``)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes import share_functions as sf


def _conv_net() -> onnx.ModelProto:
    """Convs over ragged channel counts (16, 48, 40, 72, 24: activation bodies of several shapes,
    padded and not, blocks that end in a tail), a depthwise conv, then two MatMuls: ~150 K weights,
    so that the weights dominate the file as in a mid-size model."""
    rng = np.random.default_rng(11)
    shapes = {"w1": (48, 16, 3, 3), "w2": (40, 48, 1, 1), "w3": (72, 40, 3, 3), "wd": (72, 1, 3, 3),
              "w4": (24, 72, 1, 1), "m1": (24, 512), "m2": (512, 128)}
    inits = [numpy_helper.from_array((rng.standard_t(4, s) * 0.05).astype(np.float32), n) for n, s in shapes.items()]
    inits += [numpy_helper.from_array(rng.normal(0, 0.1, (c,)).astype(np.float32), f"b{c}") for c in (48, 40, 72)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b48"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b40"], ["c2"]),
        helper.make_node("Conv", ["c2", "w3", "b72"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "wd"], ["c4"], pads=[1, 1, 1, 1], group=72),
        helper.make_node("Conv", ["c4", "w4"], ["c5"]),
        helper.make_node("GlobalAveragePool", ["c5"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "m1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("MatMul", ["hr", "m2"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def net() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.normal(0, s, (1, 16, 10, 10)).astype(np.float32)} for s in (0.5, 1.0, 4.0)]
    feeds[2]["x"][0, 3, 2, 2] = 0.0
    feeds[2]["x"][0, 5] = -0.0  # a block of -0: its sign must survive both forms
    return _conv_net(), feeds


def _quantized(model: onnx.ModelProto, cfg, feeds: list, share: bool) -> onnx.ModelProto:
    """``onnxptq.quantize``'s model with share_functions on (the new form) or off (one definition per body)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sf, "SHARE", share)
        return onnxptq.quantize(model, cfg, feeds).model


def _quantize(model: onnx.ModelProto, preset: str, new_form: bool, feeds: list) -> onnx.ModelProto:
    cfg = onnxptq.get_preset(preset).replace(repair=False, pack_weights=new_form)
    return _quantized(model, cfg, feeds[:2], new_form)


def _run(model: onnx.ModelProto, feeds: list) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX6", "MX4", "MXINT8", "MXFP8_E4M3", "MXFP6_E2M3", "MXFP4"])
def test_new_form_computes_the_old_forms_outputs_bit_for_bit(net, preset):
    """Activations quantized by shared definitions, weights packed: the same outputs as one
    definition per body and fp32 weights, and fewer definitions than calls."""
    model, feeds = net
    new, old = _quantize(model, preset, True, feeds), _quantize(model, preset, False, feeds)
    calls = sum(n.domain == "onnxptq" for n in new.graph.node)
    assert calls >= 4, preset  # the activations are quantized by our functions
    assert len(new.functions) < len(old.functions), (preset, len(new.functions), len(old.functions))
    for a, b in zip(_run(new, feeds), _run(old, feeds)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), preset
    assert new.ByteSize() < 0.6 * old.ByteSize()


@pytest.mark.parametrize("preset, limit", [("MXINT8", 0.285), ("MXFP4", 0.16), ("BFP16", 0.285), ("MX9", 0.318),
                                           ("MX6", 0.257)])
def test_block_file_within_the_issue_target(net, preset, limit, tmp_path):
    """The delivered file against the issue's ≤ 0.30x (8-bit elements) / ≤ 0.20x (MXFP4), with
    the margin measured (blockfile7: MXINT8 0.281, MXFP4 0.156, BFP16 0.285; the in-memory
    model, before the write leaves out what lean_file.py leaves out: 0.287, 0.162, 0.291).
    blockfile8: BFP16 0.282 (the small groups' codes by arithmetic, no 1 KB table), MX9 0.316 and
    MX6 0.256 (the depthwise conv's blocks of one element without a padding code and shift; main
    0.320 / 0.259); MX9's 9 bits an element cannot reach 0.30 on a model this small."""
    model, feeds = net
    path = tmp_path / "q.onnx"
    onnxptq.quantize(model, onnxptq.get_preset(preset).replace(repair=False), feeds[:2], output=str(path))
    ratio = path.stat().st_size / model.ByteSize()
    assert ratio <= limit, f"{preset}: {ratio:.3f}x the fp32 file"


def _function(name: str, c: float, shape: list[int]) -> onnx.FunctionProto:
    nodes = [helper.make_node("Constant", [], ["scale_c"], value=numpy_helper.from_array(np.full(shape, c, np.float32))),
             helper.make_node("Mul", ["x", "scale_c"], ["prod_long_name"]),
             helper.make_node("Constant", [], ["one"], value_float=1.0),
             helper.make_node("Add", ["prod_long_name", "one"], ["y"])]
    return helper.make_function("onnxptq", name, ["x"], ["y"], nodes, [helper.make_opsetid("", 17)])


def test_share_functions_lifts_the_constants_that_differ():
    """Four definitions of one body shape (two values of a constant, one shape of it differing,
    one repeated exactly) become one; each call passes its own value; equal values are one
    initializer; a definition called from inside a function keeps its own constants."""
    fns = [_function("A_s2", 2.0, [1]), _function("A_s3", 3.0, [1]), _function("A_s2again", 2.0, [1]),
           _function("A_row", 0.5, [1, 4])]
    calls = [helper.make_node(f.name, [i], [o], domain="onnxptq") for f, i, o in
             zip(fns, ["x", "y1", "y2", "y3"], ["y1", "y2", "y3", "y"])]
    graph = helper.make_graph(calls, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)],
                              functions=fns, ir_version=8)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3.5
    before = _run(model, [{"x": x}])[0]
    shared = onnx.ModelProto()
    shared.CopyFrom(model)
    sf.share_functions(shared, domains={"onnxptq"})
    sf.compact_bodies(shared, domains={"onnxptq"})
    onnx.checker.check_model(shared)
    assert len(shared.functions) == 1 and shared.functions[0].name.startswith("A_")
    assert [len(n.input) for n in shared.graph.node] == [2, 2, 2, 2]
    assert len(shared.graph.initializer) == 3  # 2.0 (twice), 3.0, the [1, 4] row
    assert shared.graph.node[0].input[1] == shared.graph.node[2].input[1]
    body = shared.functions[0]
    # short private names: the lifted input ``a``, the product and the Constant ``b``, ``c``; ``x``, ``y`` kept
    assert list(body.input) == ["x", "a"] and {o for n in body.node for o in n.output} == {"y", "b", "c"}
    assert np.array_equal(_run(shared, [{"x": x}])[0].view(np.uint32), before.view(np.uint32))
    np.testing.assert_array_equal(before, (((x * 2 + 1) * 3 + 1) * 2 + 1) * 0.5 + 1)

    # a call inside a function cannot read an initializer: that group is left as it was
    outer = helper.make_function("onnxptq", "Outer", ["x"], ["y"], [helper.make_node("A_s3", ["x"], ["y"], domain="onnxptq")],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)])
    inside = onnx.ModelProto()
    inside.CopyFrom(model)
    inside.functions.append(outer)
    inside.graph.node.append(helper.make_node("Outer", ["y"], ["z"], domain="onnxptq"))
    inside.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]))
    sf.share_functions(inside, domains={"onnxptq"})
    assert len(inside.functions) == 5 and not inside.graph.initializer


def test_share_functions_groups_bodies_that_differ_in_their_private_names():
    """Emit names a specialisation's private values after its tensor: two bodies equal but for
    those names and a constant's value are one definition (akiki_vad MX9 kept two apart, 1.7 KB),
    computing what each computed, bit for bit."""
    def named(name: str, c: float, stem: str) -> onnx.FunctionProto:
        nodes = [helper.make_node("Constant", [], [f"{stem}_c"], value=numpy_helper.from_array(np.full([1], c, np.float32))),
                 helper.make_node("Mul", ["x", f"{stem}_c"], [f"{stem}_prod"]),
                 helper.make_node("Abs", [f"{stem}_prod"], ["y"])]
        return helper.make_function("onnxptq", name, ["x"], ["y"], nodes, [helper.make_opsetid("", 17)])

    x, before = _shared_pair(named("A_conv1", 0.75, "conv1"), named("A_conv22", -1.5, "conv22"))
    np.testing.assert_array_equal(before, np.abs(np.abs(x * np.float32(0.75)) * np.float32(-1.5)))


def _shared_pair(first: onnx.FunctionProto, second: onnx.FunctionProto) -> tuple[np.ndarray, np.ndarray]:
    """A model calling ``first`` then ``second``, shared and compacted: asserts one definition is
    left and the outputs are the unshared model's bit for bit; returns the input and those outputs."""
    calls = [helper.make_node(first.name, ["x"], ["h"], domain="onnxptq"),
             helper.make_node(second.name, ["h"], ["y"], domain="onnxptq")]
    graph = helper.make_graph(calls, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)],
                              functions=[first, second], ir_version=8)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) * 0.37 - 1.1
    before = _run(model, [{"x": x}])[0]
    sf.compact_bodies(sf.share_functions(model, domains={"onnxptq"}), domains={"onnxptq"})
    onnx.checker.check_model(model)
    assert len(model.functions) == 1
    assert np.array_equal(_run(model, [{"x": x}])[0].view(np.uint32), before.view(np.uint32))
    return x, before


def test_a_call_inside_an_if_branch_reads_lifted_values_from_the_main_graph():
    """A quantizer inside an If branch whose definition is shared passes main-graph initializers
    (outer scope) and computes what its own definition computed, bit for bit."""
    from test_quantize_subgraphs import _config, _if_feeds, make_if_model

    from onnxptq.graph.walk import all_graphs

    model, feeds = make_if_model(0), _if_feeds(4, 1, (True, False))
    # Without the size hint (pipeline/observed_sizes.py): with it the graph input's call, seen small,
    # takes the branch-free body and no longer shares the branch call's definition, which is what
    # this test is about (the branch's tensors are never hinted: they are not main-graph tensors).
    with pytest.MonkeyPatch.context() as m:
        m.setattr("onnxptq.pipeline.build.of_calibration", lambda calibrated: {})
        built = {share: _quantized(model, _config("MXINT8"), feeds, share) for share in (False, True)}
    inits = {t.name for t in built[True].graph.initializer}
    body_calls = [n for g in list(all_graphs(built[True].graph))[1:] for n in g.node if n.domain == "onnxptq"]
    assert any(i in inits for n in body_calls for i in n.input[1:]), [list(n.input) for n in body_calls]
    for f in feeds:
        a, b = (ort.InferenceSession(built[k].SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
                for k in (True, False))
        assert all(np.array_equal(x.view(np.uint8), y.view(np.uint8)) for x, y in zip(a, b))


# --------------------------------------------------------------------------- the delivered file (lean_file.lean)

@pytest.fixture(scope="module")
def delivered(net, tmp_path_factory):
    """(model, feeds, {preset: (in-memory result model, the file's model, file bytes)}) for MX9 and MXFP4,
    and MX9's file written the old way (``LEAN_CALLS = False``)."""
    from onnxptq.pipeline import lean_file

    model, feeds = net
    out: dict[str, tuple[onnx.ModelProto, onnx.ModelProto, int]] = {}
    folder = tmp_path_factory.mktemp("delivered")
    for preset in ("MX9", "MXFP4"):
        path = folder / f"{preset}.onnx"
        cfg = onnxptq.get_preset(preset).replace(repair=False)
        result = onnxptq.quantize(model, cfg, feeds[:2], output=str(path))
        out[preset] = (result.model, onnx.load(str(path)), path.stat().st_size)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(lean_file, "LEAN_CALLS", False)
        path = folder / "MX9.old.onnx"
        onnxptq.quantize(model, onnxptq.get_preset("MX9").replace(repair=False), feeds[:2], output=str(path))
        out["MX9 old"] = (onnx.load(str(path)), onnx.load(str(path)), path.stat().st_size)
    return model, feeds, out


@pytest.mark.parametrize("preset", ["MX9", "MXFP4"])
def test_delivered_file_computes_the_in_memory_model_bit_for_bit(delivered, preset):
    """The file holds the calls' shared attributes once (the function's defaults), short call
    outputs and decode chains without names, and computes what the pipeline's model computes,
    bit for bit; that model is left as it was (attributes on every call, long names)."""
    from onnxptq.graph.call_attributes import call_attributes

    _, feeds, out = delivered
    memory, file, size = out[preset]
    onnx.checker.check_model(file)
    for a, b in zip(_run(memory, feeds), _run(file, feeds)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), preset
    calls = {n.input[0]: n for n in file.graph.node if n.domain == "onnxptq"}
    kept = {n.input[0]: n for n in memory.graph.node if n.domain == "onnxptq"}
    assert len(calls) >= 4 and calls.keys() == kept.keys()
    assert all(n.attribute for n in kept.values())  # the in-memory model is restored after the write
    # calls without node names, definitions under their family and a number; the in-memory ones keep theirs
    assert not any(n.name for n in calls.values()) and all(n.name == n.input[0] for n in kept.values())
    assert {f.name for f in file.functions} == {n.op_type for n in calls.values()}
    assert all(re.fullmatch(r"(MX|BFP)QuantizeDequantize_\d+", f.name) for f in file.functions)
    assert all(len(n.op_type) > 24 for n in kept.values())
    assert sum(len(n.attribute) for n in calls.values()) < sum(len(n.attribute) for n in kept.values()) / 2
    assert any(f.attribute_proto for f in file.functions)
    for name, node in kept.items():  # the accessor reads the same attributes from either form
        want = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert call_attributes(file, calls[name]) == want == call_attributes(memory, node), name
    # the calls' outputs short (lean_file.short_value_names: the model's own tensors are too), the graph's output kept
    assert all(len(n.output[0]) <= 3 for n in calls.values() if n.output[0] != "y")
    assert all(len(n.output[0]) > 3 for n in kept.values() if n.output[0] != "y")
    chain = [n for n in file.graph.node if n.op_type in ("Split", "Gather", "Transpose")]
    assert chain and not any(n.name for n in chain)
    # the packer's tables and streams: short names of the same prefix and kind (short_table_names),
    # then in the file names of a few letters like every other tensor (short_value_names)
    from onnxptq.pipeline import lean_file

    copy = onnx.ModelProto()
    copy.CopyFrom(memory)
    undo = lean_file.short_table_names(copy)
    packed = [t.name for t in copy.graph.initializer if t.name.startswith(("pkt_", "packed_"))]
    assert packed and all(re.fullmatch(r"pkt_\w{1,4}|packed_\d+_[a-z][a-z0-9_]*", n) for n in packed), packed
    undo()
    assert copy == memory
    assert all(len(t.name) <= 3 for t in file.graph.initializer), [t.name for t in file.graph.initializer if len(t.name) > 3]
    assert any(t.name.startswith("pkt_i") for t in memory.graph.initializer)  # the in-memory names stay
    # small integer tensors as varints in the file (shape tensors, Split sizes), raw bytes in memory
    ints = [t for t in file.graph.initializer if t.data_type == TensorProto.INT64]
    assert ints and any(t.int64_data for t in ints) and not any(t.int64_data for t in memory.graph.initializer)
    assert size < memory.ByteSize()


def test_lean_calls_off_writes_the_old_form_and_a_larger_file(delivered):
    model, feeds, out = delivered
    old, _, old_size = out["MX9 old"]
    new_size = out["MX9"][2]
    assert all(n.attribute for n in old.graph.node if n.domain == "onnxptq")
    assert not any(f.attribute_proto for f in old.functions)
    calls = sum(n.domain == "onnxptq" for n in old.graph.node)
    assert old_size - new_size > 200 * calls, (old_size, new_size, calls)
    for a, b in zip(_run(old, feeds), _run(out["MX9"][1], feeds)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_shared_call_attributes_keep_what_differs_and_undo_exactly():
    """The value most calls hold becomes the default; a call holding another keeps its own; an
    attribute one call lacks stays on the calls; the undo gives back the same bytes."""
    from onnxptq.graph.call_attributes import call_attribute, call_attributes
    from onnxptq.pipeline.lean_file import share_call_attributes

    fn = _function("A", 2.0, [1])
    fn.attribute.extend(["axis", "mode", "only_some"])
    once = _function("B", 3.0, [1])  # called once: its attribute moves too (its bare name declared goes)
    once.attribute.extend(["axis"])
    calls = [helper.make_node("A", [i], [o], domain="onnxptq", axis=ax, mode="to_bfp_prime", **extra)
             for i, o, ax, extra in [("x", "y1", 1, {"only_some": 4}), ("y1", "y2", 1, {}), ("y2", "y3", -1, {})]]
    calls.append(helper.make_node("B", ["y3"], ["y"], domain="onnxptq", axis=1))
    graph = helper.make_graph(calls, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)],
                              functions=[fn, once], ir_version=10)
    before = model.SerializeToString()
    wanted = [call_attributes(model, n) for n in model.graph.node]
    undo = share_call_attributes(model)
    onnx.checker.check_model(model)
    assert [call_attributes(model, n) for n in model.graph.node] == wanted
    assert {a.name for a in model.functions[0].attribute_proto} == {"axis", "mode"}
    assert [sorted(a.name for a in n.attribute) for n in model.graph.node] == [["only_some"], [], ["axis"], []]
    assert list(model.functions[0].attribute) == ["only_some"] and not model.functions[1].attribute
    assert call_attribute(model, model.graph.node[1], "axis") == 1 and call_attribute(model, model.graph.node[2], "axis") == -1
    assert call_attribute(model, model.graph.node[1], "only_some", "none") == "none"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(_run(model, [{"x": x}])[0], _run(onnx.ModelProto.FromString(before), [{"x": x}])[0])
    undo()
    assert model.SerializeToString() == before


def test_integer_tensors_written_as_varints_where_shorter_and_undone():
    """``varint_integers``: an int64 shape tensor, an int32 table and a body Constant take their
    varint field (the same values, fewer bytes); a tensor holding -1 (a 10-byte varint) and a large one
    keep their raw bytes; the model computes the same and the undo gives back the same bytes."""
    from onnxptq.pipeline import lean_file

    shape = numpy_helper.from_array(np.array([2, 2, 2], np.int64), "shape")
    negative = numpy_helper.from_array(np.array([-1], np.int64), "negative")
    table = numpy_helper.from_array(np.array([3, 1], np.int32), "table")
    big = numpy_helper.from_array(np.arange(lean_file.VARINT_MAX_ELEMENTS + 1, dtype=np.int64), "big")
    body = [helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([8], np.int64), "")),
            helper.make_node("Reshape", ["x", "s"], ["y"])]
    fn = helper.make_function("onnxptq", "Flat", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Flat", ["x"], ["f"], domain="onnxptq"),
             helper.make_node("Reshape", ["f", "shape"], ["r"]),
             helper.make_node("Reshape", ["r", "negative"], ["r2"]),
             helper.make_node("Cast", ["table"], ["tf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["r2"], ["rs"], keepdims=0),
             helper.make_node("Mul", ["tf", "rs"], ["y"]),
             helper.make_node("Size", ["big"], ["n"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                              initializer=[shape, negative, table, big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1)],
                              functions=[fn], ir_version=10)
    before = model.SerializeToString()
    x = {"x": np.arange(8, dtype=np.float32).reshape(2, 4) - 2.5}
    want = _run(model, [x])[0]
    undo = lean_file.varint_integers(model)
    onnx.checker.check_model(model)
    inits = {t.name: t for t in model.graph.initializer}
    assert list(inits["shape"].int64_data) == [2, 2, 2] and not inits["shape"].raw_data
    assert list(inits["table"].int32_data) == [3, 1] and not inits["table"].raw_data
    assert inits["negative"].raw_data and inits["big"].raw_data
    assert list(model.functions[0].node[0].attribute[0].t.int64_data) == [8]
    assert len(model.SerializeToString()) < len(before) - 20
    assert np.array_equal(_run(model, [x])[0].view(np.uint32), want.view(np.uint32))
    undo()
    assert model.SerializeToString() == before


def test_report_reads_the_format_from_a_delivered_file(delivered):
    """``describe_chain`` (the report of a file without its plan) names the BFP attributes that
    the delivered file holds on the function, not on the call."""
    from onnxptq.analysis.report import describe_chain, match_tensors

    model, _, out = delivered
    file = out["MX9"][1]
    described = [describe_chain(m, file) for m in match_tensors(model, file).values() if m.chain]
    assert any("bfp_method=to_bfp_prime" in d and "block_size=16" in d for d in described), described


def test_unpacked_form_keeps_every_call_its_attributes(net, tmp_path):
    """``pack_weights=False`` is the form for tools that read one plain node per tensor: the
    file's calls keep their attributes (``bfp_method``, ``axis`` …) on the node itself."""
    model, feeds = net
    path = tmp_path / "MX9.plain.onnx"
    cfg = onnxptq.get_preset("MX9").replace(repair=False, pack_weights=False)
    onnxptq.quantize(model, cfg, feeds[:2], output=str(path))
    calls = [n for n in onnx.load(str(path)).graph.node if n.domain == "onnxptq"]
    assert len(calls) >= 4 and all(any(a.name == "bfp_method" for a in n.attribute) for n in calls)


def test_short_value_names_reach_bodies_keep_io_and_undo_exactly():
    """Long tensor names (an initializer, a node output read inside an If branch) get 1-3 letter
    names wherever read, the most written first; graph inputs/outputs, a sparse initializer, the
    branch's own tensors, names of ≤ 2 characters and node names stay; same outputs in
    onnxruntime; writing it again changes nothing; the undo gives back the same bytes."""
    from onnx import helper as h

    from onnxptq.pipeline import lean_file

    long_w, long_r = "model/dense_3/kernel/Read:0", "model/dense_3/Relu:0"
    then = h.make_graph([h.make_node("Mul", [long_r, long_r], ["branch_own_product"]),
                         h.make_node("Identity", ["branch_own_product"], ["then_out"])], "then", [],
                        [h.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])])
    other = h.make_graph([h.make_node("Identity", [long_r], ["else_out"])], "else", [],
                         [h.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])])
    sparse = onnx.helper.make_sparse_tensor(numpy_helper.from_array(np.array([2.0], np.float32), "sparse/scale"),
                                            numpy_helper.from_array(np.array([1], np.int64), "sparse/idx"), [3])
    graph = h.make_graph(
        [h.make_node("Add", ["x", long_w], ["ab"], name="add_node"),
         h.make_node("Relu", ["ab"], [long_r], name="relu_node"),
         h.make_node("Mul", [long_r, "sparse/scale"], ["model/scaled:0"]),
         h.make_node("ReduceSum", ["model/scaled:0"], ["model/sum:0"], keepdims=0),
         h.make_node("Greater", ["model/sum:0", "zero"], ["model/cond:0"]),
         h.make_node("If", ["model/cond:0"], ["y"], then_branch=then, else_branch=other, name="if_node")],
        "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), long_w),
                     numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    graph.sparse_initializer.append(sparse)
    graph.quantization_annotation.add(tensor_name=long_r)  # a source's annotation names a tensor too
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    before = model.SerializeToString()
    x = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2}
    want = _run(model, [x])
    undo = lean_file.short_value_names(model)
    names = {o for n in model.graph.node for o in n.output} | {t.name for t in model.graph.initializer}
    assert {"y", "ab"} <= names and "sparse/scale" in {i for n in model.graph.node for i in n.input}
    assert long_w not in names and long_r not in names and all(len(n) <= 2 for n in names)
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    assert relu.name == "relu_node" and len(relu.output[0]) == 1  # the most written: 1 letter
    assert model.graph.quantization_annotation[0].tensor_name == relu.output[0]
    bodies = [a.g for a in next(n for n in model.graph.node if n.op_type == "If").attribute]
    assert all(relu.output[0] in {i for n in b.node for i in n.input} for b in bodies)
    assert "branch_own_product" in {o for b in bodies for n in b.node for o in n.output}
    onnx.checker.check_model(model)
    for a, b in zip(want, _run(model, [x])):
        assert np.array_equal(a, b)
    once = model.SerializeToString()
    lean_file.short_value_names(model)
    assert model.SerializeToString() == once  # written again: the same bytes
    undo()
    assert model.SerializeToString() == before


def test_function_docs_lose_the_attribute_list_and_undo():
    """Our definitions' doc strings are written without the clause listing every attribute (the
    definition's defaults and the calls state them); other domains' and other clauses stay."""
    from onnxptq.pipeline import lean_file

    doc = "BFP quantize-dequantize (to_bfp), attributes {'bfp_method': 'to_bfp', 'axis': 1}; see onnxptq.formats.bfp."
    ours = _function("BFP_a", 2.0, [1])
    ours.doc_string = doc
    theirs = _function("Other", 2.0, [1])
    theirs.domain, theirs.doc_string = "else", doc
    model = helper.make_model(helper.make_graph([], "g", [], []), functions=[ours, theirs],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxptq", 1),
                                             helper.make_opsetid("else", 1)])
    undo = lean_file.short_function_docs(model)
    assert model.functions[0].doc_string == "BFP quantize-dequantize (to_bfp); see onnxptq.formats.bfp."
    assert model.functions[1].doc_string == doc
    undo()
    assert model.functions[0].doc_string == doc


def test_attributes_at_their_schema_default_left_out_and_undone():
    """A standard op's attribute whose value is its schema's default at the model's opset is left
    out of the file (Conv ``group=1``, ``auto_pad``, HardSigmoid's ``beta``); one that differs
    (``alpha=0.3``) or that the schema gives no default value (``dilations``) stays; same outputs
    in onnxruntime; the undo gives back the same bytes."""
    from onnxptq.pipeline import lean_file

    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], group=1, auto_pad="NOTSET", dilations=[1, 1], pads=[1, 1, 1, 1]),
         helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.5)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    before = model.SerializeToString()
    x = {"x": rng.normal(0, 1, (1, 3, 5, 5)).astype(np.float32)}
    want = _run(model, [x])
    undo = lean_file.default_attributes(model)
    conv, hs = model.graph.node
    assert {a.name for a in conv.attribute} == {"dilations", "pads"} and {a.name for a in hs.attribute} == {"alpha"}
    onnx.checker.check_model(model)
    assert np.array_equal(_run(model, [x])[0], want[0])
    undo()
    assert model.SerializeToString() == before


def test_share_functions_groups_bodies_that_differ_in_where_a_constant_sits():
    """Two bodies equal but for the place of a Constant among their nodes, the order two
    constants were made in (and a value) are one definition once constants go first in the order
    of their first use (akiki_vad MX9's third body, blockfile13), computing what each computed,
    bit for bit."""
    def placed(name: str, c: float, early: bool) -> onnx.FunctionProto:
        const = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.full([1], c, np.float32)))
        bias = helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(np.full([1], 0.5, np.float32)))
        body = [helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("Mul", ["ax", "k"], ["m"]),
                helper.make_node("Add", ["m", "b"], ["y"])]
        nodes = [const, bias] + body if early else [bias] + body[:1] + [const] + body[1:]
        return helper.make_function("onnxptq", name, ["x"], ["y"], nodes, [helper.make_opsetid("", 17)])

    x, before = _shared_pair(placed("A_early", 0.75, True), placed("A_late", -1.5, False))
    np.testing.assert_array_equal(before, np.abs(np.abs(x) * np.float32(0.75) + np.float32(0.5)) * np.float32(-1.5) + np.float32(0.5))
