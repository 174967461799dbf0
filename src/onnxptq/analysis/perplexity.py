"""Perplexity of a causal language model over token windows: an onnxruntime session + token ids in.

Why a module of its own: weight-only quantization of LLMs (issue 29) is judged by perplexity, and
the figure must be computed the same way for our outputs and for every peer's, on the same tokens.
This module is pure: it never reads files or tokenizes (``analysis.lm_text`` does that), so a test
can hand it a hand-built model and a list of ids and check it against a NumPy computation.

Windows (the Hugging Face "sliding window" convention, without its one-token loss per window):
window ``k`` feeds tokens ``[k*stride, k*stride + window)`` (the last one may be shorter) and scores
only the targets that no earlier window scored, so every token from the second on is predicted
exactly once when ``stride <= window``, with up to ``window - stride`` tokens of extra context.
With ``stride == window`` the windows do not overlap and the first token of each window has no
prediction (it has no context inside the window). The loss is the mean negative log-likelihood
(natural log) over all scored targets, and perplexity is its exponential.

A model with a KV cache (``past_key_values.{i}.key/value`` inputs, as onnxruntime-genai's builder
writes them) is fed an empty past (length 0) so each window is a plain prefill; an
``attention_mask`` input gets ones and a ``position_ids`` input ``0..len-1``. Extra outputs
(``present.*``) are not fetched.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import UsageError

log = logging.getLogger(__name__)

__all__ = ["Perplexity", "Window", "evaluate_perplexity", "token_nll", "token_windows", "LMFeeds"]


@dataclass(frozen=True)
class Window:
    """One forward pass: tokens ``[begin, end)`` are fed, targets ``[score_from, end)`` are scored."""

    begin: int
    end: int
    score_from: int


@dataclass(frozen=True)
class Perplexity:
    """Mean negative log-likelihood (nats per token) over ``tokens`` scored targets in ``windows`` passes."""

    nll: float
    tokens: int
    windows: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    def as_dict(self) -> dict[str, float | int]:
        return {"perplexity": self.perplexity, "nll": self.nll, "tokens": self.tokens, "windows": self.windows}


def token_windows(n_tokens: int, window: int, stride: int, max_windows: int | None = None) -> list[Window]:
    """The windows over ``n_tokens`` ids (see the module docstring for the convention).

    Raises UsageError for a window < 2 (nothing to predict), a stride outside ``1..window`` (a
    larger stride would skip tokens silently), ``max_windows`` < 1, or a text shorter than one
    window (a perplexity over less context than asked would not be comparable with other figures).
    """
    if window < 2:
        raise UsageError(f"window must be at least 2 tokens (one context, one target), got {window}")
    if not 1 <= stride <= window:
        raise UsageError(f"stride must be between 1 and the window ({window}), got {stride}")
    if max_windows is not None and max_windows < 1:
        raise UsageError(f"max_windows must be at least 1, got {max_windows}")
    if n_tokens < window:
        raise UsageError(f"the text has {n_tokens} tokens, fewer than one window of {window}: "
                         f"give a longer text or a smaller --window")
    out: list[Window] = []
    scored_to = 1  # the first token is never a target
    begin = 0
    while scored_to < n_tokens:
        end = min(begin + window, n_tokens)
        score_from = max(scored_to, begin + 1)
        if score_from >= end:  # a one-token tail after non-overlapping windows: nothing to predict
            break
        out.append(Window(begin, end, score_from))
        scored_to = end
        if max_windows is not None and len(out) >= max_windows:
            break
        begin += stride
    return out


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-position negative log-likelihood: ``logsumexp(logits[i]) - logits[i, targets[i]]`` in float64.

    ``logits`` is [n, vocab] (any float dtype), ``targets`` [n] integer ids in ``0..vocab-1``.
    Float64 because a 49k-way log-sum-exp in float32 loses the digits a quantization comparison
    looks at.
    """
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.int64)
    if logits.ndim != 2 or targets.shape != (logits.shape[0],):
        raise UsageError(f"logits must be [n, vocab] and targets [n], got {logits.shape} and {targets.shape}")
    if targets.size and (targets.min() < 0 or targets.max() >= logits.shape[1]):
        raise UsageError(f"a token id is outside the model's vocabulary of {logits.shape[1]}: "
                         f"ids range {targets.min()}..{targets.max()}")
    peak = logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(logits - peak).sum(axis=1)) + peak[:, 0]
    return lse - logits[np.arange(len(targets)), targets]


class LMFeeds:
    """Builds the feed dict of one window for a session's declared inputs.

    WHY a class: the input roles (ids, mask, positions, empty past and its shape) are read from the
    session once and checked up front, so a model the tool cannot drive fails before any window
    runs, with the input named.
    """

    def __init__(self, session: Any) -> None:
        self.ids_name: str | None = None
        self.mask_name: str | None = None
        self.positions_name: str | None = None
        self.past: dict[str, tuple[tuple[int, ...], Any]] = {}
        others = []
        for inp in session.get_inputs():
            name = inp.name
            if name == "input_ids":
                self.ids_name = name
            elif name == "attention_mask":
                self.mask_name = name
            elif name == "position_ids":
                self.positions_name = name
            elif name.startswith("past_key_values") or name.startswith("past."):
                self.past[name] = (self._past_shape(name, inp.shape), _numpy_dtype(inp.type))
            else:
                others.append(inp)
        if self.ids_name is None:
            ints = [i for i in others if i.type == "tensor(int64)" and len(i.shape) == 2]
            if len(ints) == 1:
                self.ids_name = ints[0].name
                others.remove(ints[0])
        if self.ids_name is None:
            raise UsageError("the model has no 'input_ids' input (nor a single int64 [batch, seq] input): "
                             f"inputs are {[i.name for i in session.get_inputs()]}")
        if others:
            raise UsageError(f"the model has inputs a language-model evaluation cannot fill: "
                             f"{[i.name for i in others]} (known: input_ids, attention_mask, position_ids, "
                             f"past_key_values.*)")
        outputs = [o.name for o in session.get_outputs()]
        self.logits_name = "logits" if "logits" in outputs else outputs[0]

    @staticmethod
    def _past_shape(name: str, shape: Sequence[Any]) -> tuple[int, ...]:
        """[1, heads, 0, head_dim]: batch 1, empty past; heads and head_dim must be static in the model."""
        if len(shape) != 4:
            raise UsageError(f"past input {name!r} has rank {len(shape)}; expected [batch, heads, past, head_dim]")
        heads, head_dim = shape[1], shape[3]
        if not isinstance(heads, int) or not isinstance(head_dim, int):
            raise UsageError(f"past input {name!r} has shape {list(shape)}: its heads and head_dim must be "
                             f"static to feed an empty past")
        return (1, heads, 0, head_dim)

    def __call__(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64).reshape(1, -1)
        feed = {self.ids_name: ids}
        if self.mask_name:
            feed[self.mask_name] = np.ones_like(ids)
        if self.positions_name:
            feed[self.positions_name] = np.arange(ids.shape[1], dtype=np.int64)[None]
        for name, (shape, dtype) in self.past.items():
            feed[name] = np.zeros(shape, dtype=dtype)
        return feed


def _numpy_dtype(ort_type: str) -> Any:
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16,
            "tensor(double)": np.float64, "tensor(bfloat16)": np.float32}.get(ort_type, np.float32)


def evaluate_perplexity(
    session: Any,
    token_ids: Sequence[int] | np.ndarray,
    *,
    window: int = 512,
    stride: int = 512,
    max_windows: int | None = None,
    progress: bool = False,
) -> Perplexity:
    """Perplexity of ``session``'s model on ``token_ids`` over :func:`token_windows`.

    ``session`` is an onnxruntime ``InferenceSession`` (or anything with its ``get_inputs``,
    ``get_outputs`` and ``run``) whose logits output is [1, seq, vocab].
    """
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    plan = token_windows(len(ids), window, stride, max_windows)
    feeds = LMFeeds(session)
    total = 0.0
    count = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(plan), desc="Perplexity", unit="window")
    try:
        for w in plan:
            logits = session.run([feeds.logits_name], feeds(ids[w.begin:w.end]))[0]
            if logits.ndim != 3 or logits.shape[:2] != (1, w.end - w.begin):
                raise UsageError(f"output {feeds.logits_name!r} has shape {list(logits.shape)}; expected "
                                 f"[1, {w.end - w.begin}, vocab] for a window of {w.end - w.begin} tokens")
            # Position p predicts token p+1: targets [score_from, end) come from positions one before.
            first = w.score_from - w.begin - 1
            nll = token_nll(logits[0, first:w.end - w.begin - 1], ids[w.score_from:w.end])
            total += float(nll.sum())
            count += len(nll)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(ppl=f"{math.exp(total / count):.3f}")
    finally:
        if bar is not None:
            bar.close()
    result = Perplexity(nll=total / count, tokens=count, windows=len(plan))
    log.info("perplexity %.4f over %d tokens in %d windows", result.perplexity, count, len(plan))
    return result
