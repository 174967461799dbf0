"""onnxruntime's one-hot grouped Conv (bias correction's input taps) against a dense 3×3 Conv of the same input
(the ΔW Conv the probe runs), one thread, batch 1, best of 3 rounds of 5 runs (blockq18): the ratio that sets
``_taps_cheaper``'s rule in pipeline/refine/bias_correction.py.

    OMP_NUM_THREADS=1 python bench/bias_taps_cost.py
"""
import numpy as np, onnx, onnxruntime as ort, time
from onnx import helper, TensorProto as T, numpy_helper
def sess(nodes, inits):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, None)], [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    o = ort.SessionOptions(); o.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
for C, Cout, H, W in [(64, 64, 32, 76), (32, 32, 96, 96), (128, 128, 12, 40), (16, 16, 160, 160), (64, 16, 32, 76)]:
    x = np.random.rand(1, C, H, W).astype(np.float32)
    dw = numpy_helper.from_array(np.random.rand(Cout, C, 3, 3).astype(np.float32), "w")
    oh = np.zeros((C * 9, 1, 3, 3), np.float32); oh.reshape(C, 9, 9)[:, np.arange(9), np.arange(9)] = 1
    ax = numpy_helper.from_array(np.array([0, 2, 3], np.int64), "a")
    s1 = sess([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1,1,1,1]), helper.make_node("ReduceMean", ["c", "a"], ["y"], keepdims=0)], [dw, ax])
    s2 = sess([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1,1,1,1], group=C, kernel_shape=[3,3]), helper.make_node("ReduceMean", ["c", "a"], ["y"], keepdims=0)], [numpy_helper.from_array(oh, "w"), ax])
    best = {}
    for _ in range(3):
        for k, s in (("dW conv", s1), ("taps", s2)):
            t = time.process_time(); [s.run(None, {"x": x}) for _ in range(5)]; d = (time.process_time() - t) / 5
            best[k] = min(best.get(k, 9), d)
    print(C, Cout, H, W, {k: f"{v*1e3:.2f} ms" for k, v in best.items()}, f"taps/dW {best['taps']/best['dW conv']:.2f}")
