"""``onnxptq evaluate-lm MODEL --text FILE``: perplexity of a causal language model on a text.

The tokenizer is the ``tokenizer.json`` in the model's folder unless ``--tokenizer`` names another
(file or folder); it needs the ``llm`` extra (``tokenizers``). Windows of ``--window`` tokens every
``--stride`` tokens (see :mod:`onnxptq.analysis.perplexity`). Prints the perplexity (or JSON).
"""

from __future__ import annotations

import argparse
import json

from ._args import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate-lm", help="perplexity of a causal language model on a text file",
                       description=__doc__)
    p.add_argument("model", help="the ONNX model (input_ids in, logits out; a KV cache is fed empty)")
    p.add_argument("--text", required=True, help="UTF-8 text file to score")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json or its folder (default: the model's folder)")
    p.add_argument("--window", type=positive_int, default=512, help="tokens per forward pass (default 512)")
    p.add_argument("--stride", type=positive_int, default=None,
                   help="tokens between window starts (default: the window, no overlap)")
    p.add_argument("--max-windows", type=positive_int, default=None, help="score at most this many windows")
    p.add_argument("--threads", type=positive_int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--accuracy-level", type=int, choices=(0, 1, 2, 3, 4), default=None,
                   help="session.qdq_matmulnbits_accuracy_level for fused DequantizeLinear+MatMul "
                        "(onnxruntime's default is 4: int8 activations; 1 keeps float32)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onnxptq.analysis.lm_text import encode_text, load_tokenizer, tokenizer_path
    from onnxptq.analysis.perplexity import evaluate_perplexity
    from onnxptq.errors import InputNotFoundError
    from onnxptq.sessions import open_session
    from pathlib import Path

    if not Path(args.model).is_file():
        raise InputNotFoundError(f"model file {args.model} does not exist")
    tokenizer = load_tokenizer(tokenizer_path(args.model, args.tokenizer))
    ids = encode_text(tokenizer, args.text)
    config = {}
    if args.accuracy_level is not None:
        config["session.qdq_matmulnbits_accuracy_level"] = str(args.accuracy_level)
    session = open_session(args.model, threads=args.threads, config=config)
    result = evaluate_perplexity(session, ids, window=args.window, stride=args.stride or args.window,
                                 max_windows=args.max_windows, progress=True)
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(f"perplexity {result.perplexity:.4f} (mean NLL {result.nll:.5f} over {result.tokens} tokens, "
              f"{result.windows} windows)")
    return 0
