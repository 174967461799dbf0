"""The per-tensor report as files: a self-contained HTML page (inline SVG charts, no network) and
the same figures as JSON beside it. Rendering only: the figures come from :mod:`.report`.
"""

from __future__ import annotations

import html
import json
import logging
import math
import os
from pathlib import Path

from .. import outputs
from .report import EXACT_DB, Report, TensorError
from .runtime_view import summary as runtime_summary

log = logging.getLogger(__name__)

__all__ = ["render_html", "write_report"]


def write_report(report: Report, path: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``path`` (HTML, self-contained) and the same data as JSON beside it; returns both."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        raise ValueError(f"{path}: give the HTML path; the JSON is written beside it")
    json_path = path.with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs.check_outputs({"report": path, "report JSON": json_path}, {})
    outputs.write_text(json_path, json.dumps(report.to_json(), indent=1), label="report JSON")
    outputs.write_text(path, render_html(report), label="report")
    log.info("report: wrote %s and %s (%d tensors, %d samples)", path, json_path, len(report.tensors), report.samples)
    return path, json_path


_ROLE_COLOURS = {"activation": "#3b6fb6", "weight": "#d9822b", "bias": "#7a9a3a"}


def _fmt(value: float, digits: int = 2) -> str:
    if value >= EXACT_DB:
        return "exact"
    if value <= -EXACT_DB:
        return "NaN/Inf"
    return f"{value:.{digits}f}"


def _bar_chart(rows: list[TensorError], key: str, title: str) -> str:
    """Horizontal bars, one per tensor, length = SQNR (clipped to 0..120 dB); shorter is worse."""
    if not rows:
        return ""
    label_w, bar_w, row_h, top = 300, 420, 16, 28
    height = top + row_h * len(rows) + 24
    cap = 120.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 70}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="4" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for dbv in range(0, int(cap) + 1, 20):
        x = label_w + bar_w * dbv / cap
        parts.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 20}" stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" font-size="10" text-anchor="middle">{dbv} dB</text>')
    for i, t in enumerate(rows):
        value = getattr(t, key)
        y = top + i * row_h
        w = bar_w * max(0.0, min(value, cap)) / cap
        label = t.name if len(t.name) <= 44 else "…" + t.name[-43:]
        colour = _ROLE_COLOURS.get(t.role, "#888")
        tip = html.escape(f"{t.name} ({t.role}, {t.op_type}, {t.format}): {_fmt(value)} dB")
        parts.append(f'<g><title>{tip}</title>'
                     f'<text x="{label_w - 6}" y="{y + 12}" font-size="11" text-anchor="end">{html.escape(label)}</text>'
                     f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" fill="{colour}"/>'
                     f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="10">{_fmt(value, 1)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _line_chart(rows: list[TensorError]) -> str:
    """SQNR vs float of the activations in graph order: where the error builds up."""
    acts = sorted((t for t in rows if t.role == "activation"), key=lambda t: t.graph_index)
    if len(acts) < 2:
        return ""
    w, h, left, bottom, top = 860, 260, 46, 30, 24
    values = [max(-10.0, min(t.sqnr_db, 120.0)) for t in acts]
    local_values = [max(-10.0, min(t.local_sqnr_db, 120.0)) for t in acts]
    lo, hi = min(0.0, min(values + local_values)), max(40.0, max(values + local_values))

    def xy(i: int, v: float) -> tuple[float, float]:
        x = left + (w - left - 10) * i / (len(acts) - 1)
        y = top + (h - top - bottom) * (1 - (v - lo) / (hi - lo))
        return x, y

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             'aria-label="SQNR vs float along the graph">',
             '<text x="4" y="16" font-size="13" font-weight="bold">Activations: SQNR vs float (blue) and local '
             '(grey) in graph order</text>']
    step = 20 if hi - lo > 60 else 10
    for dbv in range(int(math.ceil(lo / step) * step), int(hi) + 1, step):
        _, y = xy(0, dbv)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - 10}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                     f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="10" text-anchor="end">{dbv}</text>')
    local = " ".join("%.1f,%.1f" % xy(i, v) for i, v in enumerate(local_values))
    model = " ".join("%.1f,%.1f" % xy(i, v) for i, v in enumerate(values))
    parts.append(f'<polyline points="{local}" fill="none" stroke="#aaa" stroke-width="1"/>')
    parts.append(f'<polyline points="{model}" fill="none" stroke="#3b6fb6" stroke-width="1.5"/>')
    for i, (t, v) in enumerate(zip(acts, values)):
        x, y = xy(i, v)
        tip = html.escape(f"#{i} {t.name} ({t.op_type}): {_fmt(t.sqnr_db)} dB vs float, {_fmt(t.local_sqnr_db)} dB local")
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="#3b6fb6"><title>{tip}</title></circle>')
    parts.append(f'<text x="{w / 2:.0f}" y="{h - 6}" font-size="10" text-anchor="middle">activation tensors, '
                 'input → output</text></svg>')
    return "".join(parts)


_SCRIPT = """
(function () {
  var status = document.getElementById('status');
  window.addEventListener('error', function (e) {
    status.textContent = 'script error: ' + e.message;
    document.documentElement.setAttribute('data-report-ready', 'error');
  });
  var table = document.getElementById('tensors');
  var heads = table.tHead.rows[0].cells;
  function sortBy(col, numeric) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var asc = table.getAttribute('data-col') !== String(col) || table.getAttribute('data-dir') !== 'asc';
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute('data-v'), y = b.cells[col].getAttribute('data-v');
      var c = numeric ? parseFloat(x) - parseFloat(y) : (x < y ? -1 : x > y ? 1 : 0);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    table.setAttribute('data-col', String(col));
    table.setAttribute('data-dir', asc ? 'asc' : 'desc');
  }
  for (var i = 0; i < heads.length; i++) {
    (function (col, numeric) {
      heads[col].addEventListener('click', function () { sortBy(col, numeric); });
    })(i, heads[i].getAttribute('data-num') === '1');
  }
  status.textContent = table.tBodies[0].rows.length + ' tensors; click a column to sort';
  document.documentElement.setAttribute('data-report-ready', 'ok');
})();
"""

_STYLE = """
body{font-family:sans-serif;margin:16px;color:#222}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0;cursor:pointer;position:sticky;top:0}
td.l{text-align:left;font-family:monospace}
tr.bad td{background:#fbe3e3}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
.small{color:#666;font-size:12px}
"""


def _runtime_section(report: Report) -> str:
    """What onnxruntime's CPU provider ran: counts per op type, and every node in a fold-out list."""
    if not report.runtime:
        return ""
    esc = html.escape
    counts = "".join(
        f"<tr><td class='l'>{esc(op)}</td><td>{k.get('integer', 0)}</td><td>{k.get('float', 0)}</td><td>{k.get('removed', 0)}</td></tr>"
        for op, k in runtime_summary(report.runtime).items()
    )
    nodes = "".join(
        f"<tr><td class='l'>{esc(r.name)}</td><td class='l'>{esc(r.op_type)}</td><td class='l'>{esc(r.kind)}</td>"
        f"<td class='l'>{esc(r.kernel)}</td></tr>" for r in report.runtime
    )
    return f"""<h2>What onnxruntime ran</h2>
<p class="small">From the graph onnxruntime's CPU execution provider builds for the quantized model: <b>integer</b>
nodes became integer kernels (QLinearConv, QLinearMatMul, ...) or moved integer values, <b>float</b> nodes ran in float
between DequantizeLinear and QuantizeLinear, <b>removed</b> nodes were folded away.</p>
<table><thead><tr><th>op type</th><th>integer</th><th>float</th><th>removed</th></tr></thead><tbody>{counts}</tbody></table>
<details><summary>every node</summary><table><thead><tr><th>node</th><th>op type</th><th>runs as</th><th>kernel</th></tr></thead>
<tbody>{nodes}</tbody></table></details>"""


def render_html(report: Report, chart_rows: int = 40) -> str:
    """The report as one HTML page: inline CSS, inline SVG charts, a small inline sort script."""
    esc = html.escape
    key = "local_sqnr_db" if report.sort == "local" else "sqnr_db"
    worst = report.tensors[:chart_rows]
    out_rows = "".join(
        f"<tr><td class='l'>{esc(n)}</td><td>{m['cosine']:.6f}</td><td>{_fmt(m['sqnr_db'])}</td>"
        f"<td>{_fmt(m['psnr_db'])}</td><td>{m['max_abs_err']:.4g}</td></tr>"
        for n, m in report.outputs.items()
    )
    body_rows = []
    threshold = 30.0
    for rank, t in enumerate(report.tensors, 1):
        bad = " class='bad'" if getattr(t, key) < threshold else ""
        body_rows.append(
            f"<tr{bad}><td data-v='{rank}'>{rank}</td>"
            f"<td class='l' data-v='{esc(t.name, quote=True)}'>{esc(t.name)}</td>"
            f"<td class='l' data-v='{esc(t.role)}'>{esc(t.role)}</td>"
            f"<td class='l' data-v='{esc(t.op_type)}'>{esc(t.op_type)}</td>"
            f"<td class='l' data-v='{esc(t.format, quote=True)}'>{esc(t.format)}</td>"
            f"<td data-v='{t.local_sqnr_db:.6g}'>{_fmt(t.local_sqnr_db)}</td>"
            f"<td data-v='{t.sqnr_db:.6g}'>{_fmt(t.sqnr_db)}</td>"
            f"<td data-v='{t.cosine:.9g}'>{t.cosine:.6f}</td>"
            f"<td data-v='{t.max_abs_err:.6g}'>{t.max_abs_err:.4g}</td>"
            f"<td data-v='{t.mse:.6g}'>{t.mse:.3e}</td>"
            f"<td data-v='{t.max_abs_ref:.6g}'>{t.max_abs_ref:.4g}</td>"
            f"<td data-v='{t.elements}'>{t.elements}</td></tr>"
        )
    unmatched = ""
    if report.unmatched:
        items = "".join(f"<li><code>{esc(n)}</code>: {esc(r)}</li>" for n, r in report.unmatched.items())
        unmatched = f"<h2>Planned tensors not found</h2><ul>{items}</ul>"
    runtime = _runtime_section(report)
    if report.guard:
        items = "".join(f"<li><code>{esc(n)}</code>: {esc(d['action'])} — {esc(d['reason'])}; {esc(d.get('detail', ''))}</li>"
                        for n, d in report.guard.items())
        unmatched += f"<h2>Range-mismatch guard</h2><ul>{items}</ul>"
    legend = "".join(f"<span style='background:{c}'></span>{r}" for r, c in _ROLE_COLOURS.items())
    sort_word = "local SQNR (the tensor's own quantizer)" if report.sort == "local" else "SQNR vs the float model"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>onnxptq per-tensor error report</title>
<style>{_STYLE}</style></head>
<body>
<h1>Per-tensor quantization error</h1>
<p>Float model <code>{esc(report.float_model)}</code> vs quantized model <code>{esc(report.quantized_model)}</code>,
{report.samples} sample(s), {len(report.tensors)} quantized tensors, sorted worst-first by {sort_word}.</p>
<p class="small">SQNR = 10·log10(Σref² / Σ(ref − quantized)²) over all samples. <b>vs float</b>: the quantized model's
value against the float model's (includes upstream error). <b>local</b>: the tensor's quantizer input against its output
inside the quantized model (the noise this quantizer adds). Weights: both are the same. Rows under {threshold:.0f} dB
are shaded.</p>
<h2>Graph outputs</h2>
<table><thead><tr><th>output</th><th>cosine</th><th>SQNR dB</th><th>PSNR dB</th><th>max |err|</th></tr></thead>
<tbody>{out_rows}</tbody></table>
<h2>Worst tensors</h2>
<div class="legend small">{legend}</div>
{_bar_chart(worst, key, f"{sort_word}: worst {len(worst)} (dB, longer is better)")}
{_line_chart(report.tensors)}
{unmatched}
{runtime}
<h2>All quantized tensors</h2>
<p id="status" class="small">(sorting needs JavaScript)</p>
<table id="tensors"><thead><tr>
<th data-num="1">rank</th><th>tensor</th><th>role</th><th>op type</th><th>format</th>
<th data-num="1">local SQNR dB</th><th data-num="1">SQNR vs float dB</th><th data-num="1">cosine</th>
<th data-num="1">max |err|</th><th data-num="1">MSE</th><th data-num="1">max |ref|</th><th data-num="1">elements</th>
</tr></thead>
<tbody>
{"".join(body_rows)}
</tbody></table>
<script>{_SCRIPT}</script>
</body></html>
"""
