"""fuzz22: a PESTO-like soft arg-max exported by torch (TorchScript 17 and dynamo 18): ArgMax of the logits, weights
from their softmax, values the bin numbers cast to float or a cents table gathered. Prints what analysis/ordinal_bins
finds, each preset's floor (repair off) and, on 200 fresh feeds, how far the arg-max moved and the decoded value.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/fuzz22_torch_alwa.py BF16,A8W8,FP16,MXFP8_E4M3 /work/cache/fuzz22/torch
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

import onnxptq
from onnxptq.analysis.ordinal_bins import soft_argmax_windows, ordinal_outputs
logging.disable(logging.WARNING); warnings.simplefilter("ignore")
NB = 48
OUT = sys.argv[2] if len(sys.argv) > 2 else "/tmp/fuzz22_torch"
Path(OUT).mkdir(parents=True, exist_ok=True)

class Alwa(torch.nn.Module):
    def __init__(self, table: bool):
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Linear(8, 1)
        self.ripple = torch.nn.Linear(8, NB)
        self.table = table
        self.register_buffer("cents", torch.arange(NB, dtype=torch.float32) * 20.0 + 1000.0)
        self.register_buffer("bins", torch.arange(NB, dtype=torch.float32))

    def forward(self, x):
        c = torch.sigmoid(self.enc(x)) * (NB - 1)
        logits = -0.5 * ((self.bins - c) / 1.5) ** 2 + 0.05 * torch.tanh(self.ripple(x))
        probs = torch.softmax(logits, dim=-1)
        am = torch.argmax(logits, dim=-1, keepdim=True)
        idx = (am + torch.arange(-1, 2)).clamp(0, NB - 1)
        w = probs.gather(-1, idx)
        v = self.cents.expand_as(probs).gather(-1, idx) if self.table else idx.float()
        return probs, (w * v).sum(-1) / w.sum(-1)

def feeds(n, seed):
    r = np.random.default_rng(seed)
    return [{"x": r.normal(0, 1, (1, 6, 8)).astype(np.float32)} for _ in range(n)]

for table in (False, True):
    for dynamo in (False, True):
        name = f"{OUT}/alwa_{'table' if table else 'cast'}_{'dynamo18' if dynamo else 'ts17'}.onnx"
        try:
            if dynamo:
                torch.onnx.export(Alwa(table), (torch.randn(1, 6, 8),), name, dynamo=True, opset_version=18, input_names=["x"])
            else:
                torch.onnx.export(Alwa(table), (torch.randn(1, 6, 8),), name, opset_version=17, input_names=["x"], dynamo=False)
        except Exception as e:
            print(name, "export failed", type(e).__name__, str(e)[:200]); continue
        m = onnx.load(name)
        print(name.split("/")[-1], "windows", soft_argmax_windows(m), "ordinal", ordinal_outputs(m))
        calib, held = feeds(24, 1), feeds(200, 2)
        f = ort.InferenceSession(name, providers=["CPUExecutionProvider"])
        for preset in sys.argv[1].split(","):
            cfg = dataclasses.replace(onnxptq.get_preset(preset), repair=False)
            try:
                res = onnxptq.quantize(name, cfg, data=calib, output=name + f".{preset}.onnx")
            except Exception as e:
                print("  ", preset, "RAISED", type(e).__name__, str(e)[:200]); continue
            q = ort.InferenceSession(name + f".{preset}.onnx", providers=["CPUExecutionProvider"])
            moved, dp, nan = [], [], 0
            for d in held:
                (pf, yf), (pq, yq) = f.run(None, d), q.run(None, d)
                moved.append(np.abs(pf.argmax(-1) - pq.argmax(-1)).ravel()); dp.append(np.abs(yf - yq).ravel()); nan += int(np.isnan(pq).sum() + np.isnan(yq).sum())
            moved, dp = np.concatenate(moved), np.concatenate(dp)
            v = res.floor
            state = "held" if v.ok else "BROKEN " + ",".join(v.broken)
            print(f"   {preset:10s} floor {state[:60]:60s} fresh: argmax exact {np.mean(moved == 0):.4f} within 1 {np.mean(moved <= 1):.4f}  |dvalue| max {dp.max():.3g}  nan {nan}")
