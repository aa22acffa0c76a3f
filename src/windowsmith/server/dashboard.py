"""The dashboard: one HTML page, its CSS and a little JS inline (no build step, no CDN, works offline).

The page lists the sessions (server-rendered); for the selected one the script reads
``/api/sessions/{id}`` and draws, as inline SVG, the per-turn composition of each pack by layer and
the cache read / write / uncached tokens of each call with its cost, lists the compaction events, and
shows a pack's manifest with its diff against the previous pack. It polls while the agent runs and
redraws only when the session's head moved.
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote

#: Colours per layer (stable across turns; unknown layers get a grey).
LAYER_COLOURS = {
    "tools": "#6b7280", "system": "#1f2937", "instructions": "#7c3aed", "skills": "#a855f7",
    "history": "#2563eb", "task": "#059669", "memory": "#d97706", "knowledge": "#b45309",
    "evidence": "#dc2626", "recitation": "#0d9488", "failures": "#be123c", "usage": "#9ca3af",
}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#111;background:#fafafa}
header{background:#111827;color:#fff;padding:8px 16px}header h1{font-size:16px;margin:0}
main{display:flex;gap:16px;padding:12px 16px}nav{min-width:220px;max-width:260px}
nav a{display:block;padding:3px 6px;color:#1d4ed8;text-decoration:none;border-radius:4px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
nav a.sel{background:#dbeafe}section{flex:1;min-width:0}
h2{font-size:15px;margin:14px 0 6px}.card{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:10px;margin-bottom:10px}
table{border-collapse:collapse;font-size:12px}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}.legend span{display:inline-block;margin-right:10px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
pre{font-size:11px;max-height:320px;overflow:auto;background:#f3f4f6;padding:6px;margin:0}
.muted{color:#6b7280}.bar{cursor:pointer}.cols{display:flex;gap:10px}.cols>div{flex:1;min-width:0}
"""

_JS = r"""
const CFG = JSON.parse(document.getElementById('cfg').textContent);
const COLOURS = CFG.colours;
const qs = new URLSearchParams(location.search);
const TOKEN = qs.get('token');
let head = null, detail = null, selected = null;
function api(path){
  const h = TOKEN ? {'Authorization': 'Bearer ' + TOKEN} : {};
  return fetch(path, {headers: h}).then(r => { if(!r.ok) throw new Error(path + ': HTTP ' + r.status); return r.json(); });
}
function esc(s){ return String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c])); }
function colour(name){ return COLOURS[name] || '#9ca3af'; }
function stacked(el, rows, keys, colourOf, onclick){
  const W = Math.max(320, el.clientWidth || 800), H = 180, pad = 30;
  const max = Math.max(1, ...rows.map(r => keys.reduce((a, k) => a + (r.values[k] || 0), 0)));
  const bw = Math.max(2, Math.min(28, (W - pad) / Math.max(1, rows.length) - 2));
  let s = `<svg width="${W}" height="${H + 18}" role="img">`;
  s += `<text x="0" y="10" font-size="10" fill="#6b7280">${max.toLocaleString()}</text>`;
  rows.forEach((r, i) => {
    let y = H, x = pad + i * (bw + 2);
    keys.forEach(k => {
      const v = r.values[k] || 0; if (!v) return;
      const h = v / max * (H - 14);
      y -= h;
      s += `<rect class="bar seg" data-i="${i}" data-key="${esc(k)}" x="${x}" y="${y}" width="${bw}" height="${h}" fill="${colourOf(k)}"><title>${esc(r.label)} ${esc(k)}: ${v.toLocaleString()}</title></rect>`;
    });
    if (r.mark) s += `<text x="${x + bw / 2}" y="${H + 14}" font-size="11" text-anchor="middle" fill="#be123c">&#9650;</text>`;
  });
  s += '</svg>';
  el.innerHTML = s;
  if (onclick) el.querySelectorAll('rect').forEach(n => n.addEventListener('click', () => onclick(+n.dataset.i)));
}
function legend(el, keys, colourOf){
  el.innerHTML = keys.map(k => `<span><i style="background:${colourOf(k)}"></i>${esc(k)}</span>`).join('');
}
function draw(d){
  detail = d;
  document.getElementById('title').textContent = d.id;
  document.getElementById('stats').textContent =
    `${d.events} events · ${d.messages} messages · ${d.turns.length} packs · ${d.calls.length} calls · ` +
    `${d.compactions.length} compaction events · cost $${d.cost.toFixed(4)}`;
  const layers = [...new Set(d.turns.flatMap(t => Object.keys(t.layers)))];
  const order = Object.keys(COLOURS).filter(k => layers.includes(k)).concat(layers.filter(k => !(k in COLOURS)));
  const cseqs = d.compactions.map(c => c.seq);
  const rows = d.turns.map((t, i) => ({label: 'turn ' + (i + 1), values: t.layers,
    mark: cseqs.some(s => s <= t.seq && (i === 0 || s > d.turns[i - 1].seq))}));
  stacked(document.getElementById('composition'), rows, order, colour, showPack);
  legend(document.getElementById('composition-legend'), order, colour);
  const ck = ['cache_read', 'cache_write', 'uncached'];
  const cc = {cache_read: '#16a34a', cache_write: '#f59e0b', uncached: '#ef4444'};
  stacked(document.getElementById('cache'), d.calls.map((c, i) => ({label: 'call ' + (i + 1), values: c})), ck, k => cc[k]);
  legend(document.getElementById('cache-legend'), ck, k => cc[k]);
  document.getElementById('calls').innerHTML = '<tr><th>call</th><th>pack</th><th>cache read</th><th>cache write</th><th>uncached</th><th>output</th><th>cost</th></tr>' +
    d.calls.map((c, i) => `<tr><td>${i + 1}</td><td>${esc((c.pack_id || '').slice(0, 10))}</td><td>${c.cache_read.toLocaleString()}</td><td>${c.cache_write.toLocaleString()}</td><td>${c.uncached.toLocaleString()}</td><td>${c.output.toLocaleString()}</td><td>${c.cost == null ? '?' : '$' + c.cost.toFixed(5)}</td></tr>`).join('');
  document.getElementById('compactions').innerHTML = d.compactions.length ? d.compactions.map(c =>
    `<li><b>${esc(c.type)}</b> at seq ${c.seq}` + (c.folds != null ? ` · ${c.folds} folds` : '') +
    (c.first_seq != null ? ` · seq ${c.first_seq}-${c.last_seq}` : '') +
    (c.dropped_units != null ? ` · ${c.dropped_units} units dropped` : '') +
    ` — <span class="muted">${esc(c.reason || '')}</span></li>`).join('') : '<li class="muted">none yet</li>';
  if (selected === null && d.turns.length) showPack(d.turns.length - 1);
}
function showPack(i){
  selected = i;
  const t = detail.turns[i];
  document.getElementById('pack-title').textContent = `turn ${i + 1}: pack ${t.pack_id.slice(0, 12)} (${t.tokens.toLocaleString()} tokens)`;
  api('/api/packs/' + encodeURIComponent(t.pack_id)).then(m => {
    document.getElementById('manifest').textContent = JSON.stringify(m, null, 2);
  }).catch(e => { document.getElementById('manifest').textContent = String(e); });
  if (i > 0) {
    const a = detail.turns[i - 1].pack_id;
    api(`/api/diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(t.pack_id)}`).then(df => {
      const lines = [`tokens ${df.tokens.a.toLocaleString()} → ${df.tokens.b.toLocaleString()} (${df.tokens.delta >= 0 ? '+' : ''}${df.tokens.delta})`,
        df.cache_prefix.kept ? 'cache prefix kept' : `cache prefix broke at part ${df.cache_prefix.broke_at_part} (${df.cache_prefix.broke_in})`];
      for (const [k, v] of Object.entries(df.layers)) lines.push(`${k}: ${v.a} → ${v.b} (${v.delta >= 0 ? '+' : ''}${v.delta})`);
      for (const a of df.actions_b) lines.push(`action: ${a.kind || ''} ${a.layer || ''} ${a.reason || ''}`);
      document.getElementById('diff').textContent = lines.join('\n');
    }).catch(e => { document.getElementById('diff').textContent = String(e); });
  } else document.getElementById('diff').textContent = 'first pack: nothing to compare';
}
function poll(){
  if (!CFG.session) return;
  api('/api/sessions/' + encodeURIComponent(CFG.session)).then(d => {
    if (d.head !== head) { head = d.head; draw(d); }
    document.getElementById('live').textContent = 'live · updated ' + new Date().toLocaleTimeString();
  }).catch(e => { document.getElementById('live').textContent = String(e); })
    .finally(() => setTimeout(poll, CFG.poll_ms));
}
poll();
"""


def render_page(sessions: list[dict[str, Any]], selected: str | None, poll_seconds: float,
                token: str | None = None) -> str:
    """The page; ``token`` (from ``?token=``) is kept in the session links so they stay authorized."""
    keep = f"&token={quote(token, safe='')}" if token else ""
    if selected is None and sessions:
        selected = sessions[-1]["id"]
    links = "".join(
        f'<a class="{"sel" if s["id"] == selected else ""}" data-session="{html.escape(s["id"])}" '
        f'href="?session={html.escape(quote(s["id"], safe="") + keep)}">{html.escape(s["id"])} <span class="muted">({s["events"]})</span></a>'
        for s in sessions
    ) or '<p class="muted">no sessions yet: point an agent at this server</p>'
    cfg = json.dumps({"session": selected, "poll_ms": int(poll_seconds * 1000), "colours": LAYER_COLOURS})
    cfg = cfg.replace("</", "<\\/")
    body = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>windowsmith</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{_CSS}</style></head><body>
<header><h1>windowsmith · context windows</h1></header>
<main><nav><h2>sessions</h2>{links}</nav>
<section id="session"><h2 id="title">{html.escape(selected or "")}</h2><div class="muted" id="stats"></div>
<div class="muted" id="live"></div>
<div class="card"><h2>Per-turn composition by layer (tokens; &#9650; compaction)</h2><div id="composition"></div>
<div class="legend" id="composition-legend"></div></div>
<div class="card"><h2>Cache per call (tokens)</h2><div id="cache"></div><div class="legend" id="cache-legend"></div>
<table id="calls"></table></div>
<div class="card"><h2>Compaction events</h2><ul id="compactions"></ul></div>
<div class="card"><h2 id="pack-title">Pack</h2><div class="cols"><div><h2>Manifest</h2><pre id="manifest"></pre></div>
<div><h2>Diff against the previous pack</h2><pre id="diff"></pre></div></div></div>
</section></main>
<script type="application/json" id="cfg">{cfg}</script><script>{_JS}</script></body></html>"""
    return body
