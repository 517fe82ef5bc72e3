"""The HTML run report of ``otel-progress scan --html FILE``.

One self-contained file (inline CSS and script, a Content-Security-Policy that forbids
every network fetch): a summary of the scan, then one row per agent run sorted by tokens
wasted after the first detection, filterable and paged so that thousands of runs stay
usable. A row opens the run's timeline, drawn on demand: each tool call a mark coloured
by tool (parallel calls stacked in one column), failed calls marked, detections flagged
with their reason and level (the nudge text on hover), and the run's cumulative tokens
below. ``#open=N`` in the URL opens the first N timelines on load (``#open=all`` every
one shown), ``#open=<trace id>`` that trace's runs; several, comma-separated.

The timelines need the per-call data: ``otel-progress scan --html`` keeps it during the
scan (``scan_paths(..., timelines=True)``, so stdin works too); a
:class:`~otel_progress.scan.ScanResult` without it makes :func:`write_html` re-read the
input files it is given (``sources``). Without either, the report has the summary and
the detections but no timelines.
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conventions.spans import Lineage, SpanKind, SpanRecord, read_tokens, read_tool_call
from ..otlp.files import ReadProblem, iter_documents, open_input, spans_from_request
from .analyse import RunRow, TraceReport, run_rows

__all__ = ["collect_timelines", "render_html", "trace_timelines", "write_html"]


@dataclass
class _Timeline:
    """The per-call data of one run, for its timeline."""

    start_ns: int = 0
    calls: list[tuple[int, int, str, str, bool, str, str]] = field(default_factory=list)
    # (start_ns, end_ns, tool, span_id, error, error_type, parent_id)
    tokens: list[tuple[int, int]] = field(default_factory=list)  # (time_ns, tokens)
    agent_ends: dict[str, int] = field(default_factory=dict)  # sub-agent span id -> end ns


def collect_timelines(sources: Iterable[str]) -> dict[tuple[str, str], _Timeline]:
    """Read OTLP/JSON files again and collect each run's calls and token usage, keyed by
    ``(trace_id, run_id)`` exactly as the engine groups them. Traces are assembled as
    the scan assembles them, so what is held at once is bounded the same way."""
    from ..runs.assembly import TraceAssembler

    assembler = TraceAssembler()
    out: dict[tuple[str, str], _Timeline] = {}
    for path in sources:
        if path == "-":
            continue
        try:
            stream, _ = open_input(path)
        except OSError:
            continue
        try:
            for item in iter_documents(stream, path):
                if isinstance(item, ReadProblem):
                    continue
                try:
                    spans = list(spans_from_request(item[1]))
                except (ValueError, TypeError):
                    continue
                for span in spans:
                    if span.trace_id and span.span_id:
                        assembler.add(span, path, item[0])
                for trace in assembler.end_document():
                    out.update(trace_timelines(trace.trace_id, list(trace.spans.values())))
        except (OSError, EOFError):
            pass
        finally:
            stream.close()
    for trace in assembler.finish():
        out.update(trace_timelines(trace.trace_id, list(trace.spans.values())))
    return out


def trace_timelines(trace_id: str, spans: Sequence[SpanRecord]) -> dict[tuple[str, str], _Timeline]:
    """The timelines of one complete trace's runs, keyed by ``(trace_id, run_id)``. A span
    no reader can make sense of is left out, as the analysis leaves it out."""
    out: dict[tuple[str, str], _Timeline] = {}
    lineage = Lineage(max_spans=max(len(spans) * 2, 16))
    kinds: dict[str, SpanKind] = {}
    for s in spans:
        try:
            kinds[s.span_id] = lineage.add_record(s)
        except Exception:  # reported by the analysis
            continue
    for span in sorted((s for s in spans if s.span_id in kinds), key=lambda s: (s.start_ns, s.span_id)):
        try:
            _add_to_timeline(out, trace_id, span, kinds[span.span_id], lineage)
        except Exception:  # as above
            continue
    for tl in out.values():
        tl.calls.sort()
        tl.tokens.sort()
        starts = [c[0] for c in tl.calls] + [t[0] for t in tl.tokens]
        tl.start_ns = min(starts) if starts else 0
    return out


def _add_to_timeline(out: dict[tuple[str, str], _Timeline], trace_id: str, span: SpanRecord, kind: SpanKind,
                     lineage: Lineage) -> None:
    run_id, _agent, _node, nested = lineage.resolve(span.parent_id)
    if kind is SpanKind.AGENT:
        parent_run = lineage.parent_run(span.span_id)
        tl = out.setdefault((trace_id, parent_run), _Timeline())
        tl.agent_ends[span.span_id] = span.end_ns
    elif kind is SpanKind.TOOL and not nested:
        call = read_tool_call(span, run_id=run_id)
        tl = out.setdefault((trace_id, run_id), _Timeline())
        # tool names, error types and parents repeat across a run's calls: one string each
        tl.calls.append((span.start_ns, span.end_ns or span.start_ns, sys.intern(call.name), span.span_id,
                         call.error, sys.intern(call.error_type or ""), sys.intern(span.parent_id)))
    elif kind is SpanKind.MODEL:
        tokens = read_tokens(span)
        if tokens:
            out.setdefault((trace_id, run_id), _Timeline()).tokens.append((span.start_ns, tokens))


def _columns(calls: Sequence[tuple[int, int, str, str, bool, str, str]]) -> list[list[int]]:
    """Group calls into turns the way the engine does: overlapping calls under one parent
    are one turn. Returns lists of call indexes."""
    cols: list[list[int]] = []
    end = -1
    parent = None
    for i, (start, stop, *_rest) in enumerate(calls):
        if cols and start < end and calls[i][6] == parent:
            cols[-1].append(i)
            end = max(end, stop)
        else:
            cols.append([i])
            end, parent = stop, calls[i][6]
    return cols


def _timeline_data(tl: _Timeline, detections: Sequence[Any]) -> dict[str, Any]:
    cols = _columns(tl.calls)
    col_of = {tl.calls[i][3]: c for c, members in enumerate(cols) for i in members}
    base = tl.start_ns
    tools: dict[str, int] = {}
    marks = []
    for c, members in enumerate(cols):
        for row, i in enumerate(members):
            start, stop, name, _sid, err, etype, _p = tl.calls[i]
            tid = tools.setdefault(name, len(tools))
            marks.append([c, row, tid, round((start - base) / 1e9, 3), round((stop - start) / 1e9, 3),
                          1 if err else 0, etype])
    # cumulative tokens at each column: tokens of model calls started before its first call
    cumulative = []
    total = 0
    k = 0
    for members in cols:
        first = tl.calls[members[0]][0]
        while k < len(tl.tokens) and tl.tokens[k][0] <= first:
            total += tl.tokens[k][1]
            k += 1
        cumulative.append(total)
    final = total + sum(t for _, t in tl.tokens[k:])
    flags = []
    for d in detections:
        col = col_of.get(d.span_id)
        if col is None and d.span_id in tl.agent_ends:
            end = tl.agent_ends[d.span_id]
            col = max((c for c, m in enumerate(cols) if tl.calls[m[0]][0] <= end), default=0)
        if col is None:
            col = max(0, len(cols) - 1)
        flags.append([col, d.reason.value, int(d.level), d.turn, d.nudge, d.scope.value, d.tool])
    return {"tools": list(tools), "marks": marks, "cols": len(cols), "tokens": cumulative,
            "final": final, "flags": flags}


def _row(r: RunRow, tl: _Timeline | None) -> dict[str, Any]:
    dets = r.detections
    return {
        "trace": r.trace_id,
        "run": r.run_id,
        "agent": r.agent or "",
        "turns": r.turns,
        "tokens": r.tokens,
        "wn": r.wasted_turns,
        "wt": r.wasted_tokens,
        "first": r.first_detection_turn,
        "level": r.level,
        "n": len(dets),
        "reasons": sorted({d.reason.value for d in dets}),
        "tl": _timeline_data(tl, dets) if tl is not None and tl.calls else None,
        "dets": [[d.turn, d.reason.value, int(d.level), d.nudge] for d in dets] if (tl is None or not tl.calls) else [],
    }


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;
  color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 22px}
header h1{font-size:18px;margin:0 0 4px}
header p{margin:0;color:#c9d1e0}
main{padding:16px 22px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:14px}
.card{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}
.card span{color:#5b6475;font-size:12px}
.controls{display:flex;gap:12px;align-items:center;margin:8px 0}
.controls input[type=search]{padding:5px 8px;width:280px;border:1px solid #c5cbd6;border-radius:4px}
table.runs{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e8}
table.runs th,table.runs td{padding:5px 8px;border-bottom:1px solid #eceff3;text-align:left;white-space:nowrap}
table.runs th{background:#eef1f5;font-weight:600;position:sticky;top:0}
table.runs td.num,table.runs th.num{text-align:right}
table.runs tr.run{cursor:pointer}
table.runs tr.run:hover{background:#f2f6ff}
tr.open{background:#eaf1ff}
.lvl{display:inline-block;border-radius:3px;padding:0 6px;color:#fff;font-size:12px}
.l0{background:#9aa3b2}.l1{background:#d39a00}.l2{background:#e0661b}.l3{background:#c9252c}
td.tl{background:#fbfcfe;padding:10px 12px}
.legend{display:flex;flex-wrap:wrap;gap:10px;font-size:12px;margin:4px 0 6px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:middle}
.dets{margin:6px 0 0;padding-left:18px;font-size:12px;white-space:normal}
.dets li{margin:2px 0}
.more{margin:10px 0}
button{padding:4px 10px;border:1px solid #9aa3b2;background:#fff;border-radius:4px;cursor:pointer}
.muted{color:#5b6475}
.problems{background:#fff4e5;border:1px solid #f0c36d;padding:6px 10px;border-radius:4px;margin-bottom:10px}
svg text{font:11px system-ui,"DejaVu Sans",sans-serif}
"""

_JS = r"""
(function(){
const data = JSON.parse(document.getElementById('report-data').textContent);
const rows = data.runs;
const PAGE = 200;
let shown = PAGE, filter = '', onlyDet = false;
const tbody = document.getElementById('runs-body');
const fmt = n => n.toLocaleString('en-US');
const PALETTE = ['#1f77b4','#2ca02c','#9467bd','#ff7f0e','#17becf','#8c564b','#e377c2','#bcbd22',
  '#7f7f7f','#393b79','#637939','#843c39'];
function colour(tid){ return PALETTE[tid % PALETTE.length]; }
const ESC = {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'};
function esc(s){return String(s).replace(/[&<>"']/g, c => ESC[c]);}
function visible(){
  const f = filter.toLowerCase();
  return rows.filter(r => (!onlyDet || r.n>0) && (!f || (r.trace+' '+r.run+' '+r.agent+' '+
      r.reasons.join(' ')).toLowerCase().includes(f)));
}
function render(){
  const list = visible();
  const html = [];
  list.slice(0, shown).forEach((r) => {
    const idx = rows.indexOf(r);
    html.push('<tr class="run" data-i="'+idx+'"><td>'+esc(r.trace.slice(0,16))+'</td><td>'+esc(r.agent||'-')+
      '</td><td class="num">'+r.turns+'</td><td class="num">'+fmt(r.tokens)+'</td><td class="num">'+r.n+
      '</td><td class="num">'+(r.first==null?'-':r.first)+'</td><td><span class="lvl l'+r.level+'">'+
      (r.level?['','nudge','restart','park'][r.level]:'none')+'</span></td><td>'+esc(r.reasons.join(', ')||'-')+
      '</td><td class="num">'+r.wn+'</td><td class="num">'+fmt(r.wt)+'</td></tr>');
  });
  tbody.innerHTML = html.join('');
  document.getElementById('count').textContent = Math.min(shown, list.length)+' of '+list.length+' runs shown';
  document.getElementById('more').style.display = list.length > shown ? '' : 'none';
}
function timelineSVG(r){
  const t = r.tl, colW = 22, left = 8, top = 26, rowH = 14;
  const maxRow = t.marks.reduce((m,x)=>Math.max(m,x[1]),0);
  const markH = (maxRow+1)*rowH;
  const tokTop = top + markH + 22, tokH = 56;
  const W = Math.max(300, left*2 + t.cols*colW), H = tokTop + tokH + 22;
  const maxTok = Math.max(1, t.final, ...t.tokens);
  const p = ['<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="'+W+'" height="'+H+'">'];
  p.push('<text x="'+left+'" y="12" fill="#5b6475">tool calls (one column per turn)</text>');
  t.marks.forEach(m => {
    const [c,row,tid,start,dur,err,etype] = m, name = t.tools[tid];
    const x = left + c*colW + 3, y = top + row*rowH;
    const tip = 'turn '+(c+1)+' · '+name+' · t+'+start+' s · '+dur+' s'+(err?' · error '+etype:'');
    p.push('<rect class="call'+(err?' err':'')+'" x="'+x+'" y="'+y+'" width="'+(colW-6)+'" height="'+(rowH-3)+
      '" rx="2" fill="'+colour(tid)+'"'+(err?' stroke="#c9252c" stroke-width="2"':'')+'><title>'+esc(tip)+
          '</title></rect>');
    if(err) p.push('<text x="'+(x+(colW-6)/2)+'" y="'+(y+rowH-5)+
        '" text-anchor="middle" fill="#fff" font-weight="bold">×</text>');
  });
  t.flags.forEach((f,k) => {
    const [c,reason,level,turn,nudge,scope,tool] = f;
    const x = left + c*colW + colW/2, col = ['#9aa3b2','#d39a00','#e0661b','#c9252c'][level]||'#c9252c';
    const tip = reason+' · level '+level+' ('+['','nudge','restart','park'][level]+') · turn '+turn+' · '+
        scope+(tool?' · '+tool:'')+'\n\n'+nudge;
    p.push('<g class="flag" data-reason="'+esc(reason)+'" data-level="'+level+'"><title>'+esc(tip)+'</title>'+
      '<line x1="'+x+'" y1="14" x2="'+x+'" y2="'+(top+markH)+'" stroke="'+col+
          '" stroke-width="2" stroke-dasharray="3,2"/>'+
      '<path d="M'+x+' 14 l12 5 l-12 5 z" fill="'+col+'"/></g>');
  });
  p.push('<text x="'+left+'" y="'+(tokTop-6)+'" fill="#5b6475">cumulative tokens ('+fmt(t.final)+
      ' in all)</text>');
  let pts = [];
  t.tokens.forEach((v,c) => { const x = left + c*colW + colW/2; pts.push(x+','+(tokTop+
      tokH-(v/maxTok)*tokH).toFixed(1)); });
  if(pts.length){
    const x0 = left + colW/2, x1 = left + (t.tokens.length-1)*colW + colW/2;
    p.push('<polygon class="tokens" points="'+x0+','+(tokTop+tokH)+' '+pts.join(' ')+' '+x1+','+(tokTop+
        tokH)+'" fill="#c9d8f2" stroke="#3b6fc4"/>');
  }
  p.push('<line x1="'+left+'" y1="'+(tokTop+tokH)+'" x2="'+(W-left)+'" y2="'+(tokTop+tokH)+
      '" stroke="#9aa3b2"/>');
  p.push('</svg>');
  return p.join('');
}
function detailHTML(r){
  if(!r.tl){
    const items = r.dets.map(d => '<li><b>'+esc(d[1])+'</b> level '+d[2]+' at turn '+d[0]+
        '<br><span class="muted">'+esc(d[3])+'</span></li>');
    return '<p class="muted">No per-call data for this run.</p>'+
        (items.length?'<ul class="dets">'+items.join('')+'</ul>':'');
  }
  const legend = r.tl.tools.map((n,k) => '<span><i style="background:'+colour(k)+'"></i>'+esc(n)+
      '</span>').join('');
  const dets = r.tl.flags.map(f => '<li><b>'+esc(f[1])+'</b> level '+f[2]+' ('+
      ['','nudge','restart','park'][f[2]]+') at turn '+f[3]+
    ' <span class="muted">['+esc(f[5])+']</span><br><span class="muted">'+esc(f[4])+'</span></li>').join('');
  return '<div class="legend">'+legend+
    '<span><i style="background:#fff;border:2px solid #c9252c"></i>failed call</span></div>'+
    timelineSVG(r)+(dets?'<ul class="dets">'+dets+'</ul>':'<p class="muted">No detection in this run.</p>');
}
function toggle(tr){
  const next = tr.nextElementSibling;
  if(next && next.classList.contains('detail')){ next.remove(); tr.classList.remove('open'); return; }
  const r = rows[+tr.dataset.i];
  const d = document.createElement('tr'); d.className = 'detail';
  d.innerHTML = '<td class="tl" colspan="10">'+detailHTML(r)+'</td>';
  tr.after(d); tr.classList.add('open');
}
tbody.addEventListener('click', e => { const tr = e.target.closest('tr.run'); if(tr) toggle(tr); });
document.getElementById('filter').addEventListener('input', e => { filter = e.target.value; shown = PAGE; render(); });
document.getElementById('only').addEventListener('change', e => {
  onlyDet = e.target.checked; shown = PAGE; render();
});
document.getElementById('more').addEventListener('click', () => { shown += PAGE; render(); });
render();
const m = /open=([^&]+)/.exec(location.hash);
if(m){
  const wants = decodeURIComponent(m[1]).split(',');
  const trs = Array.from(tbody.querySelectorAll('tr.run'));
  let n = -1;
  wants.forEach(w => { if(w === 'all') n = trs.length; else if(/^\d+$/.test(w)) n = Math.max(n, +w); });
  trs.forEach((tr,k) => { const r = rows[+tr.dataset.i]; if(k < n || wants.includes(r.trace)) toggle(tr); });
}
document.body.dataset.ready = '1';
})();
"""


def render_html(reports: Sequence[TraceReport], *, spans: int = 0, problems: Sequence[Any] = (),
                timelines: Mapping[tuple[str, str], _Timeline] | None = None, title: str = "otel-progress scan") -> str:
    """The report as one HTML document."""
    rows = run_rows(reports)
    rows.sort(key=lambda r: (-r.wasted_tokens, -r.wasted_turns, -len(r.detections), r.trace_id, r.run_id))
    detected = sum(1 for r in rows if r.detections)
    detections = sum(len(r.detections) for r in rows)
    tokens = sum(r.tokens for r in rows)
    wasted = sum(r.wasted_tokens for r in rows)
    # each row encoded as it is built: the per-call data is never held twice
    tls = timelines or {}
    encoded = [json.dumps(_row(r, tls.get((r.trace_id, r.run_id))), separators=(",", ":"), ensure_ascii=False)
               for r in rows]
    payload = ('{"runs":[' + ",".join(encoded) + "]}").replace("</", "<\\/")
    del encoded
    cards = [
        (len(reports), "traces"), (len(rows), "agent runs"), (detected, "runs with detections"),
        (detections, "detections"), (spans, "spans read"), (f"{tokens:,}", "tokens"),
        (f"{wasted:,}", "tokens after first detection"),
    ]
    problem_html = ""
    if problems:
        items = "".join(f"<li>{html.escape(str(p))}</li>" for p in list(problems)[:50])
        more = f"<li>… and {len(problems) - 50} more</li>" if len(problems) > 50 else ""
        problem_html = f'<div class="problems"><b>Input problems</b><ul>{items}{more}</ul></div>'
    no_timelines = "" if timelines else (
        '<p class="muted">Timelines are unavailable: no per-call data was kept or given.</p>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body>
<header><h1>{html.escape(title)}</h1><p>Agent runs that stopped making progress, from their tool-call spans.
Click a run to see its timeline; hover a flag for the reason and the nudge.</p></header>
<main>
{problem_html}
<div class="cards">{"".join(f'<div class="card"><b>{v}</b><span>{html.escape(k)}</span></div>' for v, k in cards)}</div>
{no_timelines}
<div class="controls"><input id="filter" type="search" placeholder="filter by trace, agent or reason">
<label><input id="only" type="checkbox"> only runs with detections</label><span id="count" class="muted"></span></div>
<table class="runs"><thead><tr><th>Trace</th><th>Agent</th><th class="num">Turns</th><th class="num">Tokens</th>
<th class="num">Detections</th><th class="num">First at turn</th><th>Level</th><th>Reasons</th>
<th class="num">Wasted turns</th><th class="num">Wasted tokens</th></tr></thead>
<tbody id="runs-body"></tbody></table>
<div class="more"><button id="more" type="button">Show more runs</button></div>
</main>
<script id="report-data" type="application/json">{payload}</script>
<script>{_JS}</script>
</body></html>
"""


def write_html(result: Any, path: str, *, sources: Sequence[str] | None = None) -> None:
    """Write the HTML report of a :class:`~otel_progress.scan.ScanResult` to ``path``.

    The timelines come from the result when the scan kept them
    (``scan_paths(..., timelines=True)``, as ``otel-progress scan --html`` does); else
    ``sources``, the OTLP/JSON files the scan read, are read again for them (default: the
    result's ``sources`` or ``paths`` attribute, if it has one).
    """
    timelines = getattr(result, "timelines", None)
    if timelines is None:
        if sources is None:
            sources = getattr(result, "sources", None) or getattr(result, "paths", None)
        timelines = collect_timelines(sources) if sources else {}
    problems = list(getattr(result, "problems", ()))
    hidden = getattr(result, "hidden_lines", None)
    if callable(hidden):
        problems += hidden()
    document = render_html(result.reports, spans=getattr(result, "spans", 0), problems=problems,
                           timelines=timelines)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(document)
