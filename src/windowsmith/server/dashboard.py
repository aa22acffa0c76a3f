"""The dashboard: one HTML page, its CSS and its script (``dashboard.js``, a plain file of the package) inline: no
build step, no CDN, works offline.

The header names the session's model, window and provider; the session list (from ``/api/index``) shows each
session's cost, calls and last activity and is searchable. For the selected session the script reads
``/api/sessions/{id}`` and ``/api/sessions/{id}/overview`` and shows the headline figures (cost, cache hit rate,
tokens and dollars saved against sending the full history), draws as inline SVG with axes the per-turn
composition by layer (calibrated, with the window and budget lines) and the cache per call (redrawn on resize),
lists the compaction events, shows a pack's manifest as tables (layers, actions with reasons, artifacts linking
to their redacted text) with its diff, the request last sent rendered as messages, and on demand the what-if
replay of the session under the bench's strategies. It polls while the agent runs and redraws only when the
session's head moved.
"""
from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any
from urllib.parse import quote

#: Colours per layer (stable across turns; unknown layers get a grey).
LAYER_COLOURS = {
    "tools": "#6b7280", "system": "#1f2937", "instructions": "#7c3aed", "skills": "#a855f7",
    "history": "#2563eb", "task": "#059669", "memory": "#d97706", "knowledge": "#b45309",
    "evidence": "#dc2626", "recitation": "#0d9488", "failures": "#be123c", "usage": "#9ca3af",
}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#111;background:#f6f7f9}
header{background:#111827;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:16px;margin:0}header .hdr span{margin-right:14px}header .hdr b{color:#93c5fd;font-weight:600}
header .hdr .muted{color:#9ca3af}
main{display:flex;gap:16px;padding:12px 16px}nav{min-width:230px;max-width:280px;flex:none}
nav input{width:100%;box-sizing:border-box;padding:5px 7px;border:1px solid #d1d5db;border-radius:5px;margin-bottom:6px}
nav a{display:block;padding:4px 6px;color:#1d4ed8;text-decoration:none;border-radius:4px;overflow:hidden}
nav a .sid{display:block;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
nav a .meta{display:block;font-size:11px;color:#6b7280}nav a.sel{background:#dbeafe}section{flex:1;min-width:0}
h2{font-size:15px;margin:14px 0 6px}h3{font-size:13px;margin:10px 0 4px}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:10px;margin-bottom:10px}
.figures{display:flex;gap:10px;flex-wrap:wrap}.figures .card{flex:1;min-width:150px;margin:0;cursor:help}
.figures .v{font-size:22px;font-weight:600}.figures .k{font-size:12px;color:#6b7280}.figures .s{font-size:11px;color:#6b7280}
table{border-collapse:collapse;font-size:12px}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
th{background:#f9fafb}th:first-child,td:first-child{text-align:left}td .reason{display:inline-block;text-align:left;max-width:520px}
.legend span{display:inline-block;margin-right:10px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.legend i.dash{width:14px;height:0;border-top:2px dashed;background:none}
i.sw{display:inline-block;width:9px;height:9px;margin-right:5px}
svg text{font-size:11px;fill:#374151}svg text.axis{fill:#6b7280}
pre{font-size:11px;max-height:320px;overflow:auto;background:#f3f4f6;padding:6px;margin:0;white-space:pre-wrap;word-break:break-word}
.muted{color:#6b7280}.warn{color:#b45309}.bar{cursor:pointer}.cols{display:flex;gap:10px;flex-wrap:wrap}.cols>div{flex:1;min-width:280px}
.msg{border-left:3px solid #d1d5db;padding:4px 8px;margin:6px 0;background:#fcfcfd}.msg .role{font-size:11px;font-weight:600;text-transform:uppercase;color:#4b5563}
.msg.role-system{border-color:#1f2937}.msg.role-user{border-color:#2563eb}.msg.role-assistant{border-color:#059669}.msg.role-tool{border-color:#d97706}
.msg pre.txt{max-height:160px}.call{font-size:12px;margin:3px 0}.result{font-size:12px;margin:3px 0}
.bp{display:inline-block;font-size:11px;color:#fff;background:#7c3aed;border-radius:3px;padding:0 5px;margin:2px 0}
#request{max-height:640px;overflow:auto}button{padding:4px 10px;border:1px solid #2563eb;background:#2563eb;color:#fff;border-radius:4px;cursor:pointer}
button:disabled{opacity:.5}details summary{cursor:pointer;font-size:12px;color:#4b5563}
"""

#: the page's script (a plain file in the package, inlined into the page)
_JS = resources.files(__package__).joinpath("dashboard.js").read_text(encoding="utf-8")


def _figure(key: str, label: str, sub: str) -> str:
    return (f'<div class="card" id="{key}-card"><div class="k">{label}</div><div class="v" id="{key}">…</div>'
            f'<div class="s" id="{key}-sub">{sub}</div></div>')


def render_page(sessions: list[dict[str, Any]], selected: str | None, poll_seconds: float,
                token: str | None = None) -> str:
    """The page; ``token`` (from ``?token=``) is kept in the session links so they stay authorized."""
    keep = f"&token={quote(token, safe='')}" if token else ""
    if selected is None and sessions:
        selected = sessions[-1]["id"]
    links = "".join(
        f'<a class="{"sel" if s["id"] == selected else ""}" data-session="{html.escape(s["id"])}" '
        f'href="?session={html.escape(quote(s["id"], safe="") + keep)}"><span class="sid">{html.escape(s["id"])}</span>'
        f'<span class="meta">{s["events"]} events</span></a>'
        for s in sessions
    ) or '<p class="muted">no sessions yet: point an agent at this server</p>'
    cfg = json.dumps({"session": selected, "poll_ms": int(poll_seconds * 1000), "colours": LAYER_COLOURS})
    cfg = cfg.replace("</", "<\\/")
    figures = "".join((
        _figure("h-cost", "cost (billed prices)", ""), _figure("h-calls", "model calls", ""),
        _figure("h-hit", "cache hit rate", "cache reads ÷ prompt tokens billed"),
        _figure("h-saved", "tokens saved vs full history", ""), _figure("h-cost-saved", "saved vs full history", ""),
    ))
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>windowsmith</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><link rel="icon" href="data:,"><style>{_CSS}</style></head><body>
<header><h1>windowsmith · context windows</h1><div class="hdr"><span>model <b id="hdr-model">…</b></span>
<span>window <b id="hdr-window">…</b></span><span>provider <b id="hdr-provider">…</b></span>
<span class="muted" id="hdr-cache"></span></div></header>
<main><nav><h2>sessions <span class="muted" id="session-count"></span></h2>
<input id="search" type="search" placeholder="search sessions" aria-label="search sessions">
<div id="sessions">{links}</div></nav>
<section id="session"><h2 id="title">{html.escape(selected or "")}</h2><div class="muted" id="stats"></div>
<div class="muted" id="live"></div>
<div class="figures" id="headline">{figures}</div>
<div class="card"><h2>Tokens sent per turn, by layer (calibrated)</h2><div id="composition"></div>
<div class="legend" id="composition-legend"></div></div>
<div class="card"><h2>Cache per call: prompt tokens billed</h2><div id="cache"></div><div class="legend" id="cache-legend"></div>
<details open><summary>calls</summary><table id="calls"></table></details></div>
<div class="card"><h2>What if this session had used another strategy?</h2>
<p class="muted">Replays this session's own log under the strategies of <code>windowsmith bench</code>, at its window,
with the bench's cost and identifier recall: what each would have cost, and what it would have lost.</p>
<button id="whatif-run" type="button">Replay under the other strategies</button> <span id="whatif-status" class="muted"></span>
<div id="whatif-chart"></div><table id="whatif-table"></table><p class="muted" id="whatif-note"></p></div>
<div class="card"><h2>Compaction events</h2><ul id="compactions"></ul></div>
<div class="card"><h2 id="pack-title">Pack</h2><div id="pack-facts"></div><div class="muted" id="pack-cache"></div>
<div class="cols"><div><h3>Layers</h3><table id="layers-table"></table></div>
<div><h3>Artifacts</h3><table id="artifacts-table"></table></div></div>
<h3>Actions and reasons</h3><table id="actions-table"></table>
<h3>Diff against the previous pack</h3><pre id="diff"></pre>
<details><summary>raw manifest (JSON)</summary><pre id="manifest"></pre></details></div>
<div class="card"><h2>The request last sent</h2><div class="muted" id="request-note"></div><div id="request"></div></div>
</section></main>
<script type="application/json" id="cfg">{cfg}</script><script>{_JS}</script></body></html>"""
