"""Class scores over the tokens an integer input carries: a tagger's per-token tags, a decoder step's next token.

Why: the floor reads rank-3 class scores from a linear head as *reads*, one per sequence, a read
kept only where every decision position keeps float's arg-max (analysis/class_scores.py,
"Reads"): right for a CTC reader (a captcha is one string) and wrong for a tagger. khmersm's
segmenter writes ``[1, T, 2]`` tag emissions, one per character of its ``x`` ids, that a CRF
Viterbi decodes outside the graph; its user reads the word starts. Under BF16, BFP16, MX9 and
MXINT8 two flipped positions of 286 made its 12 sentences' reads 0.846 < 0.97 and repair kept
71-136 nodes float, while word-start F1 stayed ≥ 0.997 (bench/RESULTS.md, "The fifteenth round").
(tashkeel's diacritizer is repaired alike, 54-285 nodes at words exact ≥ 0.985, and is left so: below.)

And the floor reads a rank-2 ``[B, V]`` class output by its top-1, while a decoder step called
inside a beam search is read by its top-k (analysis/beam_reads.py).

**Found by structure** (:func:`token_heads`): walking back from a graph output over every node,
the output is computed from a ``Gather`` of a constant 2-D table (an embedding, ``[V, D]``)
indexed by an integer graph input (token ids; through data movement, a ``Slice`` of the last
token or a ``Cast``). Such an output

- whose class count is **not** the row count of any table it embeds is a *tagger* (``"tags"``):
  one decision per token of the input (khmersm: 126 characters → 2 tags; LAC: 58 224 words → 59
  tags; tashkeel: 54 letters → 15 diacritics). Where float reads a background class (khmersm's
  "inside a word"), the floor judges its rank-3 scores per decision token, a word start each
  (:func:`onnxptq.analysis.class_scores.judge_positions`, ``per_token``), not per sentence; without
  one (tashkeel, LAC) a token is a part of a word the floor cannot see, and a sentence stays one read;
- whose class count **is** the row count of a table it embeds scores the vocabulary it reads: a
  decoder that reads its own output back (``"next"``): arabic-name-romanizer's decoder step
  (``prefix`` ids through a 148-row table → ``logprobs [B, 148]``); pyfrspell's teacher-forced
  decoder (``tgt_in`` → ``token_logits [B, T, 156]``) has the shape, though its int8 head is not read
  as class scores. A rank-3 one stays judged as whole reads
  (a generated sequence is one read); a rank-2 one is a step whose runner-ups a beam search takes.

No name, exporter pattern or vocabulary is looked at; the class count is checked against the data
(the output's last axis) where the floor judges it.
"""

from __future__ import annotations

from typing import Collection, Iterator

import onnx

from ..graph.walk import dataflow, upstream_nodes
from .class_scores import _const_shapes

__all__ = ["NEXT", "TAGS", "kind_for", "token_heads"]

#: a tagger: one class decision per token of an integer input, over classes that are not its tokens
TAGS = "tags"
#: next-token scores: the classes are the rows of the table the input's tokens are embedded by
NEXT = "next"

_INTEGER = frozenset((onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
                      onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.INT8))
#: what may stand between a token input and the Gather's indices
_INDEX_PATH = frozenset("Slice Gather Cast Reshape Squeeze Unsqueeze Identity Transpose Flatten Expand Clip".split())


def _from_token_input(tensor: str, producer: dict[str, onnx.NodeProto], tokens: set[str]) -> bool:
    """Whether ``tensor`` is a token input, or read from one through index-moving ops only."""
    for _ in range(8):
        if tensor in tokens:
            return True
        node = producer.get(tensor)
        if node is None or node.op_type not in _INDEX_PATH or not node.input:
            return False
        tensor = node.input[0]
    return False


def _tables(output: str, producer: dict[str, onnx.NodeProto], shapes: dict[str, tuple[int, ...]],
            tokens: set[str]) -> Iterator[int]:
    """The row counts of the embedding tables ``output`` is computed from (module docstring)."""
    for node in upstream_nodes(output, producer, lambda _node: True):
        if (node.op_type == "Gather" and len(node.input) > 1 and len(shapes.get(node.input[0], ())) == 2
                and _from_token_input(node.input[1], producer, tokens)):
            yield shapes[node.input[0]][0]


def token_heads(model: onnx.ModelProto, outputs: Collection[str] | None = None) -> dict[str, frozenset[int]]:
    """Graph outputs computed from embedded token ids (module docstring) → the row counts of the tables
    that embed them; ``outputs``: the outputs to look at (the class-score ones), every graph output
    where None. Which kind each is, the floor decides from the data's class count (:func:`kind_for`)."""
    graph = model.graph
    tokens = {i.name for i in graph.input if i.type.tensor_type.elem_type in _INTEGER}
    if not tokens:
        return {}
    producer, _ = dataflow(graph.node)
    shapes = _const_shapes(model)
    found: dict[str, frozenset[int]] = {}
    for out in graph.output:
        if outputs is not None and out.name not in outputs:
            continue
        rows = frozenset(_tables(out.name, producer, shapes, tokens))
        if rows:
            found[out.name] = rows
    return found


def kind_for(classes: int, rows: Collection[int]) -> str:
    """:data:`NEXT` where ``classes`` (an output's last axis) is the row count of a table it embeds, else :data:`TAGS`."""
    return NEXT if classes in rows else TAGS
