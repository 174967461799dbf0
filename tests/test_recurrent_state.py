"""The carried-state rule (graph/recurrent_state.py) on a small streaming LSTM built as exporters
write one: ``state`` [2, 1, H] → Gather → Unsqueeze → an If choosing it or zeros → LSTM initial
h/c; Y_h/Y_c → Squeeze → Unsqueeze → Concat → ``stateN``; Y → Gemm → Sigmoid → ``prob``.
(The real case, silero VAD MXINT8, is in tests/test_zoo.py.)"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.graph.recurrent_state import recurrent_state_float_tensors

F, H = 8, 16


def _streaming_lstm(carried: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    c = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    inits = [c(rng.normal(0, 0.4, (1, 4 * H, F)).astype(np.float32), "W"),
             c(rng.normal(0, 0.4, (1, 4 * H, H)).astype(np.float32), "R"),
             c(rng.normal(0, 0.4, (H, 1)).astype(np.float32), "Wo"),
             c(np.array(0, np.int64), "i0"), c(np.array(1, np.int64), "i1"), c(np.array([0], np.int64), "ax0"),
             c(np.zeros((1, 1, H), np.float32), "zeros"), c(np.array(True), "use_state")]
    # an If choosing the carried state (then) or zeros (else), as torch exports `h if h is not None else 0`
    then_g = helper.make_graph([helper.make_node("Identity", ["h0"], ["h_then"]), helper.make_node("Identity", ["c0"], ["c_then"])],
                               "then", [], [helper.make_tensor_value_info("h_then", TensorProto.FLOAT, [1, 1, H]),
                                            helper.make_tensor_value_info("c_then", TensorProto.FLOAT, [1, 1, H])])
    else_g = helper.make_graph([helper.make_node("Identity", ["zeros"], ["h_else"]), helper.make_node("Identity", ["zeros"], ["c_else"])],
                               "else", [], [helper.make_tensor_value_info("h_else", TensorProto.FLOAT, [1, 1, H]),
                                            helper.make_tensor_value_info("c_else", TensorProto.FLOAT, [1, 1, H])])
    nodes = [
        helper.make_node("Gather", ["state", "i0"], ["h_in"], name="Gather_h"),
        helper.make_node("Gather", ["state", "i1"], ["c_in"], name="Gather_c"),
        helper.make_node("Unsqueeze", ["h_in", "ax0"], ["h0"], name="Unsq_h"),
        helper.make_node("Unsqueeze", ["c_in", "ax0"], ["c0"], name="Unsq_c"),
        helper.make_node("If", ["use_state"], ["h_init", "c_init"], name="If_state", then_branch=then_g, else_branch=else_g),
        helper.make_node("LSTM", ["x", "W", "R", "", "", "h_init", "c_init"], ["Y", "Y_h", "Y_c"], name="LSTM_0", hidden_size=H),
        helper.make_node("Squeeze", ["Y_h", "ax0"], ["h_out"], name="Sq_h"),
        helper.make_node("Squeeze", ["Y_c", "ax0"], ["c_out"], name="Sq_c"),
        helper.make_node("Unsqueeze", ["h_out", "ax0"], ["h_st"], name="Unsq_hst"),
        helper.make_node("Unsqueeze", ["c_out", "ax0"], ["c_st"], name="Unsq_cst"),
        helper.make_node("Concat", ["h_st", "c_st"], ["stateN" if carried else "final"], name="Concat_state", axis=0),
        helper.make_node("Reshape", ["Y", "shape"], ["Y2"], name="Reshape_Y"),
        helper.make_node("MatMul", ["Y2", "Wo"], ["logit"], name="MatMul_out"),
        helper.make_node("Sigmoid", ["logit"], ["prob"], name="Sigmoid_out"),
    ]
    inits.append(c(np.array([-1, H], np.int64), "shape"))
    outputs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [4, 1])]
    if carried:
        outputs.append(helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, 1, H]))
    else:
        nodes.append(helper.make_node("ReduceMean", ["final"], ["summary"], name="Use_final"))
        outputs.append(helper.make_tensor_value_info("summary", TensorProto.FLOAT, [1, 1, 1]))
    graph = helper.make_graph(nodes, "stream", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, F]),
                                                helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, H])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_carried_state_path_is_found_through_the_if():
    why = recurrent_state_float_tensors(_streaming_lstm())
    for name in ("state", "h_in", "c0", "h_init", "c_then", "h_else", "Y_h", "Y_c", "h_out", "stateN"):
        assert name in why and "carried across calls" in why[name], name
    assert "Y" not in why and "Y2" not in why and "x" not in why  # the per-step output keeps its quantizers


def test_a_final_state_used_in_the_same_call_is_not_a_carried_state():
    assert not {"Y_h", "Y_c", "final"} & set(recurrent_state_float_tensors(_streaming_lstm(carried=False)))


def test_quantized_streaming_model_keeps_the_state_float():
    model = _streaming_lstm()
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (4, 1, F)).astype(np.float32), "state": rng.normal(0, 0.3, (2, 1, H)).astype(np.float32)}
             for _ in range(8)]
    result = quantize(model, resolve_config("MXINT8").replace(repair=False), feeds)
    assert {"state", "Y_h", "stateN"} <= set(result.plan.float_tensors)
    assert "carried across calls" in result.plan.float_tensors["Y_h"]
    # Streaming 50 calls, each model feeding back its own state: the state stays near float's. (This
    # small LSTM is contractive and drifts only 0.008 without the rule too; the case where the rule
    # decides the result is silero VAD in tests/test_zoo.py. Here the plan assertions carry the test.)
    ref, got = ort.InferenceSession(model.SerializeToString()), ort.InferenceSession(result.model.SerializeToString())
    s_ref = s_got = np.zeros((2, 1, H), np.float32)
    for _ in range(50):
        x = rng.normal(0, 1, (4, 1, F)).astype(np.float32)
        p_ref, s_ref = ref.run(None, {"x": x, "state": s_ref})
        p_got, s_got = got.run(None, {"x": x, "state": s_got})
    assert np.abs(s_ref - s_got).max() < 0.1
