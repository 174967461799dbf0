"""evaluate-lm: perplexity of a hand-built ONNX LM against NumPy; windows; KV inputs; CLI errors."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import cli
from onnxptq.analysis.lm_text import MissingExtraError, load_tokenizer
from onnxptq.analysis.perplexity import evaluate_perplexity, token_nll, token_windows
from onnxptq.errors import UsageError
from onnxptq.sessions import open_session

VOCAB, DIM, HEADS, HEAD_DIM = 11, 6, 2, 3


def _weights():
    rng = np.random.default_rng(7)
    return (rng.normal(size=(VOCAB, DIM)).astype(np.float32),
            rng.normal(size=(DIM, VOCAB)).astype(np.float32) * 2)


def _lm(kv: bool = False) -> onnx.ModelProto:
    """logits = CumSum(E[ids], seq) @ W: causal, so the context inside a window changes every logit.

    The KV variant adds what a genai-style model has: an attention_mask that scales the state
    (zeros would wreck the figure), one past key/value pair whose sum enters the logits (an empty
    past adds 0; a wrong shape fails in Concat) and present outputs.
    """
    emb, w = _weights()
    inits = [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(1, np.int64), "axis")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"]),
             helper.make_node("CumSum", ["x", "axis"], ["h"])]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", VOCAB])]
    state = "h"
    if kv:
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"]))
        past = []
        for kind in ("key", "value"):
            name = f"past_key_values.0.{kind}"
            past.append(name)
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["b", HEADS, "p", HEAD_DIM]))
            outputs.append(helper.make_tensor_value_info(f"present.0.{kind}", TensorProto.FLOAT,
                                                         ["b", HEADS, "t", HEAD_DIM]))
        inits.append(numpy_helper.from_array(np.zeros((1, HEADS, 1, HEAD_DIM), np.float32), "pad"))
        nodes += [
            helper.make_node("Concat", [past[0], "pad"], ["present.0.key"], axis=2),
            helper.make_node("Concat", [past[1], "pad"], ["present.0.value"], axis=2),
            helper.make_node("ReduceSum", [past[0]], ["psum"], keepdims=0),
            helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMean", ["maskf"], ["mscale"], keepdims=0),
            helper.make_node("Mul", ["h", "mscale"], ["hm"]),
            helper.make_node("Add", ["hm", "psum"], ["hk"]),
        ]
        state = "hk"
    nodes.append(helper.make_node("MatMul", [state, "w"], ["logits"]))
    graph = helper.make_graph(nodes, "tiny_lm", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    return model


def _numpy_nll(ids: np.ndarray, window: int, stride: int) -> tuple[float, int]:
    """The same figure, written out directly: the context restarts at each window's first token."""
    emb, w = _weights()
    total, count, scored = 0.0, 0, np.zeros(len(ids), bool)
    for begin in range(0, len(ids), stride):
        chunk = ids[begin:begin + window]
        logits = np.cumsum(emb[chunk].astype(np.float64), axis=0) @ w.astype(np.float64)
        for p in range(len(chunk) - 1):
            t = begin + p + 1
            if scored[t]:
                continue
            z = logits[p]
            total += math.log(np.exp(z - z.max()).sum()) + z.max() - z[chunk[p + 1]]
            count += 1
            scored[t] = True
        if begin + window >= len(ids):
            break
    return total / count, count


@pytest.mark.parametrize("n, window, stride", [(40, 8, 8), (40, 8, 3), (37, 10, 10), (10, 10, 1), (41, 8, 8)])
def test_perplexity_matches_numpy(n, window, stride):
    ids = np.random.default_rng(n + stride).integers(0, VOCAB, n)
    got = evaluate_perplexity(open_session(_lm()), ids, window=window, stride=stride)
    nll, count = _numpy_nll(ids, window, stride)
    assert got.tokens == count
    assert got.nll == pytest.approx(nll, rel=1e-5)
    assert got.perplexity == pytest.approx(math.exp(nll), rel=1e-5)


def test_kv_model_fed_empty_past_gives_the_plain_figure():
    ids = np.random.default_rng(3).integers(0, VOCAB, 50)
    plain = evaluate_perplexity(open_session(_lm()), ids, window=16, stride=12)
    kv = evaluate_perplexity(open_session(_lm(kv=True)), ids, window=16, stride=12)
    assert kv.tokens == plain.tokens
    assert kv.nll == pytest.approx(plain.nll, rel=1e-6)


def test_token_nll_by_hand():
    logits = np.array([[0.0, 0.0], [math.log(3.0), 0.0]])
    # uniform: -log(1/2); second row p(1) = 1/(3+1)
    assert token_nll(logits, np.array([0, 1])) == pytest.approx([math.log(2), math.log(4)])
    with pytest.raises(UsageError, match="outside the model's vocabulary of 2"):
        token_nll(logits, np.array([0, 2]))


def test_windows_cover_every_target_once():
    for n, window, stride in [(100, 16, 16), (100, 16, 5), (97, 16, 7), (16, 16, 1), (33, 16, 16)]:
        plan = token_windows(n, window, stride)
        targets = [t for w in plan for t in range(w.score_from, w.end)]
        assert len(targets) == len(set(targets))
        assert all(w.end - w.begin <= window and w.begin < w.score_from < w.end + 1 for w in plan)
        if stride < window:
            assert targets == list(range(1, n))  # overlapping windows: every token after the first
        else:
            # non-overlapping: each window's first token (a dropped one-token tail's too) has no context
            assert set(targets) == set(range(1, n)) - set(range(0, n, stride))
    # 33 = 2 * 16 + 1: the one-token tail has no context in its window and is dropped
    assert [(w.begin, w.end) for w in token_windows(33, 16, 16)] == [(0, 16), (16, 32)]
    assert len(token_windows(100, 16, 16, max_windows=2)) == 2
    assert token_windows(20, 20, 20) == [token_windows(20, 20, 20)[0]]


@pytest.mark.parametrize("args, message", [
    ((100, 1, 1), "window must be at least 2"),
    ((100, 8, 9), "stride must be between 1 and the window"),
    ((100, 8, 0), "stride must be between 1 and the window"),
    ((100, 8, 8, 0), "max_windows must be at least 1"),
    ((7, 8, 8), "the text has 7 tokens, fewer than one window of 8"),
])
def test_window_errors(args, message):
    with pytest.raises(UsageError, match=message):
        token_windows(*args)


def test_model_without_ids_input_is_refused(tmp_path):
    model = _lm()
    model.graph.input[0].name = "tokens"
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    model.graph.node[0].input[1] = "tokens32"
    model.graph.node.insert(0, helper.make_node("Cast", ["tokens"], ["tokens32"], to=TensorProto.INT64))
    with pytest.raises(UsageError, match="no 'input_ids' input"):
        evaluate_perplexity(open_session(model), np.zeros(20, np.int64), window=8, stride=8)


# --- the command: tokenizer from the model's folder ---------------------------------------------

def _folder(tmp_path, words: int = 60):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {f"w{i}": i for i in range(VOCAB - 1)} | {"[UNK]": VOCAB - 1}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    onnx.save(_lm(), tmp_path / "lm.onnx")
    ids = np.random.default_rng(5).integers(0, VOCAB - 1, words)
    (tmp_path / "text.txt").write_text(" ".join(f"w{i}" for i in ids) + "\n", encoding="utf-8")
    return tmp_path / "lm.onnx", tmp_path / "text.txt", ids


def test_cli_reads_the_tokenizer_next_to_the_model(tmp_path, capsys):
    model, text, ids = _folder(tmp_path)
    assert cli.main(["evaluate-lm", str(model), "--text", str(text), "--window", "16", "--stride", "10",
                     "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    nll, count = _numpy_nll(ids, 16, 10)
    assert got["tokens"] == count and got["perplexity"] == pytest.approx(math.exp(nll), rel=1e-5)
    assert cli.main(["evaluate-lm", str(model), "--text", str(text), "--window", "16", "--max-windows", "2",
                     "--accuracy-level", "1"]) == 0
    assert "30 tokens, 2 windows" in capsys.readouterr().out  # 2 windows x 15 targets


def test_cli_errors_name_the_file(tmp_path, capsys):
    model, text, _ = _folder(tmp_path, words=12)
    assert cli.main(["evaluate-lm", str(model), "--text", str(text), "--window", "16"]) == 2
    assert "the text has 12 tokens, fewer than one window of 16" in capsys.readouterr().err
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert cli.main(["evaluate-lm", str(model), "--text", str(text), "--tokenizer", str(other)]) == 2
    assert f"no tokenizer file: {other / 'tokenizer.json'} does not exist" in capsys.readouterr().err
    (tmp_path / "tokenizer.json").unlink()
    assert cli.main(["evaluate-lm", str(model), "--text", str(text)]) == 2
    assert "does not exist (the model's folder; name another with --tokenizer)" in capsys.readouterr().err
    assert cli.main(["evaluate-lm", str(tmp_path / "none.onnx"), "--text", str(text)]) == 2
    assert "none.onnx does not exist" in capsys.readouterr().err


def test_missing_tokenizers_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingExtraError, match=r"onnxptq\[llm\]"):
        load_tokenizer(tmp_path / "tokenizer.json")
