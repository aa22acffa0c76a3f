// The windowsmith dashboard (served inline by server/dashboard.py: no build step, no CDN, works offline).
const CFG = JSON.parse(document.getElementById('cfg').textContent);
const COLOURS = CFG.colours;
const TOKEN = new URLSearchParams(location.search).get('token');
const $ = id => document.getElementById(id);
let head = null, detail = null, overview = null, selected = null, sessions = [];

function api(path){
  const h = TOKEN ? {'Authorization': 'Bearer ' + TOKEN} : {};
  return fetch(path, {headers: h}).then(r => { if(!r.ok) throw new Error(path + ': HTTP ' + r.status); return r.json(); });
}
function withToken(url){ return TOKEN ? url + (url.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(TOKEN) : url; }
function esc(s){ return String(s).replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c])); }
function colour(name){ return COLOURS[name] || '#9ca3af'; }
function money(v, d){ return v == null ? 'n/a' : '$' + v.toFixed(d == null ? 4 : d); }
function pct(v){ return v == null ? 'n/a' : (v * 100).toFixed(1) + '%'; }
function num(v){ return v == null ? 'n/a' : Math.round(v).toLocaleString('en-US'); }
function short(v){
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + 'K';
  return String(Math.round(v));
}
function ticks(hi, n){
  if (hi <= 0) return [0];
  const raw = hi / (n || 5), mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw);
  const out = []; for (let t = 0; t <= hi * 1.0001; t += step) out.push(t); return out;
}
function cutName(type){ return type === 'emergency' ? 'cut' : type; }

// A stacked bar chart with a y axis (tokens), x labels (turn or call numbers) and optional horizontal lines.
function stacked(el, rows, keys, colourOf, opts){
  const o = opts || {};
  const W = Math.max(360, el.clientWidth || 800), H = 230, L = 56, R = 12, T = 12, B = 34;
  const pw = W - L - R, ph = H - T - B;
  const tops = rows.map(r => keys.reduce((a, k) => a + (r.values[k] || 0), 0));
  const lines = (o.lines || []).filter(l => l.value);
  const hi = Math.max(1, ...tops, ...lines.map(l => l.value)) * 1.06;
  const n = Math.max(1, rows.length), slot = pw / n, bw = Math.max(1.5, Math.min(36, slot * 0.8));
  const y = v => T + ph - v / hi * ph;
  let s = `<svg width="${W}" height="${H}" role="img" aria-label="${esc(o.title || '')}">`;
  for (const t of ticks(hi, 5)) {
    s += `<line x1="${L}" x2="${L + pw}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#eee"/>` +
         `<text class="tick" x="${L - 5}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${short(t)}</text>`;
  }
  rows.forEach((r, i) => {
    const x = L + i * slot + (slot - bw) / 2;
    let acc = 0;
    keys.forEach(k => {
      const v = r.values[k] || 0; if (!v) return;
      const h = v / hi * ph; acc += v;
      s += `<rect class="bar seg" data-i="${i}" data-key="${esc(k)}" x="${x.toFixed(1)}" y="${y(acc).toFixed(1)}" width="${bw.toFixed(1)}" height="${h.toFixed(1)}" fill="${colourOf(k)}"><title>${esc(r.label)} · ${esc(k)}: ${num(v)} tokens</title></rect>`;
    });
    if (r.mark) s += `<text class="mark" x="${(x + bw / 2).toFixed(1)}" y="${(y(acc) - 3).toFixed(1)}" font-size="11" text-anchor="middle" style="fill:#be123c">&#9650;<title>${esc(r.mark)}</title></text>`;
  });
  const every = Math.max(1, Math.ceil(n / Math.floor(pw / 28)));
  rows.forEach((r, i) => {
    if (i % every && i !== n - 1) return;
    s += `<text class="xtick" x="${(L + i * slot + slot / 2).toFixed(1)}" y="${T + ph + 14}" text-anchor="middle">${i + 1}</text>`;
  });
  for (const l of lines) {
    s += `<line class="refline" data-line="${esc(l.name)}" x1="${L}" x2="${L + pw}" y1="${y(l.value).toFixed(1)}" y2="${y(l.value).toFixed(1)}" stroke="${l.colour}" stroke-dasharray="5 3" stroke-width="1.5"/>` +
         `<text x="${L + pw - 4}" y="${(y(l.value) - 4).toFixed(1)}" text-anchor="end" style="fill:${l.colour}" font-size="11">${esc(l.name)} ${num(l.value)}</text>`;
  }
  s += `<line x1="${L}" x2="${L + pw}" y1="${T + ph}" y2="${T + ph}" stroke="#999"/><line x1="${L}" x2="${L}" y1="${T}" y2="${T + ph}" stroke="#999"/>`;
  s += `<text x="${L + pw / 2}" y="${H - 4}" text-anchor="middle" class="axis">${esc(o.xlabel || '')}</text>`;
  s += `<text x="12" y="${T + ph / 2}" transform="rotate(-90 12 ${T + ph / 2})" text-anchor="middle" class="axis">${esc(o.ylabel || 'tokens')}</text>`;
  el.innerHTML = s + '</svg>';
  if (o.onclick) el.querySelectorAll('rect').forEach(n => n.addEventListener('click', () => o.onclick(+n.dataset.i)));
}
function legend(el, keys, colourOf, extra){
  el.innerHTML = keys.map(k => `<span><i style="background:${colourOf(k)}"></i>${esc(k)}</span>`).join('') + (extra || '');
}
function table(el, headers, rows){
  el.innerHTML = '<tr>' + headers.map(h => `<th>${esc(h)}</th>`).join('') + '</tr>' +
    rows.map(r => '<tr>' + r.map(c => `<td>${c}</td>`).join('') + '</tr>').join('');
}
function figure(id, value, text){ const el = $(id); el.dataset.value = value == null ? '' : String(value); el.textContent = text; }

// ------------------------------------------------------------------ session list
function drawSessions(){
  const q = ($('search').value || '').toLowerCase();
  const list = sessions.filter(s => !q || s.id.toLowerCase().includes(q) || (s.model || '').toLowerCase().includes(q));
  $('sessions').innerHTML = list.map(s => `<a class="${s.id === CFG.session ? 'sel' : ''}" data-session="${esc(s.id)}" href="${esc(withToken('?session=' + encodeURIComponent(s.id)))}">` +
    `<span class="sid">${esc(s.id)}</span><span class="meta">${money(s.cost)} · ${s.calls} call${s.calls === 1 ? "" : "s"} · ${esc(new Date(s.last_activity).toLocaleString())}</span></a>`).join('') ||
    '<p class="muted">no session matches</p>';
  $('session-count').textContent = `${list.length} of ${sessions.length}`;
}
function loadSessions(){ return api('/api/index').then(s => { sessions = s; drawSessions(); }); }

// ------------------------------------------------------------------ the session
function drawCharts(){
  const d = detail, ov = overview; if (!d || !ov) return;
  const calLayers = Object.fromEntries(ov.turn_layers.map(t => [t.pack_id, t.layers]));
  const layers = [...new Set(d.turns.flatMap(t => Object.keys(calLayers[t.pack_id] || t.layers)))];
  const order = Object.keys(COLOURS).filter(k => layers.includes(k)).concat(layers.filter(k => !(k in COLOURS)));
  const rows = d.turns.map((t, i) => {
    const comp = d.compactions.filter(c => c.seq <= t.seq && (i === 0 || c.seq > d.turns[i - 1].seq));
    return {label: 'turn ' + (i + 1), values: calLayers[t.pack_id] || t.layers,
            mark: comp.length ? comp.map(c => cutName(c.type)).join(', ') : null};
  });
  const last = d.turns[d.turns.length - 1] || {};
  stacked($('composition'), rows, order, colour, {onclick: showPack, xlabel: 'turn (pack)', title: 'tokens per turn by layer',
    lines: [{name: 'window', value: ov.window, colour: '#111827'}, {name: 'budget', value: last.available, colour: '#dc2626'}]});
  legend($('composition-legend'), order, colour,
    '<span><i class="dash" style="border-color:#111827"></i>window</span><span><i class="dash" style="border-color:#dc2626"></i>budget (window − reserved output)</span><span style="color:#be123c">&#9650; compaction</span>');
  const ck = ['cache_read', 'cache_write', 'uncached'];
  const cc = {cache_read: '#16a34a', cache_write: '#f59e0b', uncached: '#ef4444'};
  stacked($('cache'), d.calls.map((c, i) => ({label: 'call ' + (i + 1), values: c})), ck, k => cc[k],
          {xlabel: 'model call', title: 'billed prompt tokens per call'});
  legend($('cache-legend'), ck, k => cc[k]);
}
function drawHeadline(ov){
  $('hdr-model').textContent = ov.model || '?';
  $('hdr-window').textContent = ov.window ? num(ov.window) + ' tokens' : '?';
  $('hdr-provider').textContent = ov.provider || '?';
  $('hdr-cache').textContent = ov.cache || '';
  figure('h-cost', ov.cost, money(ov.cost));
  figure('h-calls', ov.calls, num(ov.calls));
  figure('h-hit', ov.cache_hit_rate, pct(ov.cache_hit_rate));
  figure('h-saved', ov.tokens_saved, ov.tokens_saved == null ? 'n/a' : num(ov.tokens_saved));
  figure('h-cost-saved', ov.cost_saved, ov.cost_saved == null ? 'n/a' : money(ov.cost_saved));
  const fh = ov.full_history;
  $('h-saved-sub').textContent = fh ? `of ${num(fh.tokens)} the full history would have sent (${pct(ov.tokens_saved / fh.tokens)})` : 'model not in the registry';
  $('h-cost-sub').textContent = fh ? `full history: ${money(fh.cost)}` : '';
  $('h-saved-card').title = ov.full_history_note;
  $('h-cost-saved-card').title = ov.full_history_note;
  $('h-hit-card').title = 'Cache reads billed ÷ all prompt tokens billed (reads + writes + uncached), over every call.';
}
function draw(d, ov){
  detail = d; overview = ov;
  $('title').textContent = d.id;
  $('stats').textContent = `${d.events} events · ${d.messages} messages · ${d.turns.length} packs · ${d.calls.length} calls · ${d.compactions.length} compaction events`;
  drawHeadline(ov);
  drawCharts();
  table($('calls'), ['call', 'pack', 'cache read', 'cache write', 'uncached', 'output', 'cost'],
    d.calls.map((c, i) => [i + 1, esc((c.pack_id || '').slice(0, 10)), num(c.cache_read), num(c.cache_write), num(c.uncached), num(c.output), c.cost == null ? '?' : '$' + c.cost.toFixed(5)]));
  $('compactions').innerHTML = d.compactions.length ? d.compactions.map(c =>
    `<li><b>${esc(cutName(c.type))}</b>${c.type === 'emergency' ? ' <span class="muted">(model-free)</span>' : ''} at seq ${c.seq}` + (c.folds != null ? ` · ${c.folds} folds` : '') +
    (c.first_seq != null ? ` · seq ${c.first_seq}–${c.last_seq}` : '') +
    (c.dropped_units != null ? ` · ${c.dropped_units} units dropped` : '') +
    ` — <span class="muted">${esc(c.reason || '')}</span></li>`).join('') : '<li class="muted">none yet</li>';
  if (selected === null && d.turns.length) showPack(d.turns.length - 1); else if (selected !== null) showPack(selected);
  loadRequest();
}
function artifactUrl(ref){
  return withToken('/api/sessions/' + encodeURIComponent(CFG.session) + '/artifacts/' + encodeURIComponent(ref.replace('artifact://', '')));
}
function drawManifest(m){
  const cal = calibrated(m.pack_id);
  $('pack-facts').innerHTML = `<b>${num(m.tokens)}</b> tokens of ${num(m.available)} available (${pct(m.tokens / m.available)}) · window ${num(m.window)} · reserved output ${num(m.reserved_output)} · status <b>${esc(m.status)}</b> · ${m.messages} messages` +
    (m.warnings && m.warnings.length ? `<br><span class="warn">${m.warnings.map(esc).join('<br>')}</span>` : '');
  table($('layers-table'), ['layer', 'tokens', 'allocated', 'dropped', 'items', 'required'],
    Object.entries(m.layers).filter(([, v]) => v.used || v.dropped || v.allocated).map(([k, v]) =>
      [`<i class="sw" style="background:${colour(k)}"></i>${esc(k)}`, num(cal[k] != null ? cal[k] : v.used), num(v.allocated), num(v.dropped), v.items == null ? '' : v.items, v.required ? 'yes' : '']));
  table($('actions-table'), ['action', 'layer', 'tokens before', 'after', 'reason'],
    m.actions.map(a => [esc(cutName(a.kind)), esc(a.layer || ''), num(a.tokens_before), num(a.tokens_after), `<span class="reason">${esc(a.reason || '')}</span>`]));
  if (!m.actions.length) $('actions-table').innerHTML += '<tr><td colspan="5" class="muted">no action: everything fit</td></tr>';
  table($('artifacts-table'), ['artifact (opens the redacted text)'],
    m.artifacts.map(a => [`<a class="artifact" target="_blank" rel="noopener" href="${esc(artifactUrl(a))}">${esc(a.replace('artifact://', '').slice(0, 16))}…</a>`]));
  if (!m.artifacts.length) $('artifacts-table').innerHTML += '<tr><td class="muted">none referenced</td></tr>';
  $('pack-cache').textContent = overview.cache && m.pack_id === (detail.turns[detail.turns.length - 1] || {}).pack_id ? overview.cache : '';
  $('manifest').textContent = JSON.stringify(m, null, 2);
}
function calibrated(packId){ return ((overview && overview.turn_layers.find(t => t.pack_id === packId)) || {}).layers || {}; }
function showPack(i){
  selected = i;
  const t = detail.turns[i];
  if (!t) return;
  $('pack-title').textContent = `turn ${i + 1}: pack ${t.pack_id.slice(0, 12)} (${num(t.tokens)} tokens)`;
  api('/api/packs/' + encodeURIComponent(t.pack_id)).then(drawManifest)
    .catch(e => { $('manifest').textContent = String(e); });
  if (i > 0) {
    const a = detail.turns[i - 1].pack_id;
    api(`/api/diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(t.pack_id)}`).then(df => {
      const lines = [`tokens ${num(df.tokens.a)} → ${num(df.tokens.b)} (${df.tokens.delta >= 0 ? '+' : ''}${df.tokens.delta})`,
        df.cache_prefix.kept ? 'cache prefix kept' : `cache prefix broke at part ${df.cache_prefix.broke_at_part} (${df.cache_prefix.broke_in})`];
      const ca = calibrated(a), cb = calibrated(t.pack_id);
      for (const [k, v] of Object.entries(df.layers)) {
        const x = ca[k] != null ? ca[k] : v.a, y = cb[k] != null ? cb[k] : v.b;
        lines.push(`${k}: ${num(x)} → ${num(y)} (${y - x >= 0 ? '+' : ''}${num(y - x)})`);
      }
      for (const a of df.actions_b) lines.push(`action: ${cutName(a.kind || '')} ${a.layer || ''} ${a.reason || ''}`);
      $('diff').textContent = lines.join('\n');
    }).catch(e => { $('diff').textContent = String(e); });
  } else $('diff').textContent = 'first pack: nothing to compare';
}

// ------------------------------------------------------------------ the request sent, as messages
function blocksOf(content){
  if (content == null) return [];
  if (typeof content === 'string') return [{type: 'text', text: content}];
  if (Array.isArray(content)) return content;
  return [content];
}
function linked(text){
  return esc(text).replace(/artifact:\/\/([0-9a-f]{64})/g, (m, sha) => `<a class="artifact" target="_blank" rel="noopener" href="${esc(artifactUrl(sha))}">${m}</a>`);
}
function renderBlock(b){
  const mark = b.cache_control ? ' <span class="bp" title="cache_control: the cached prefix ends here">&#9873; cache breakpoint</span>' : '';
  const t = b.type || (b.text != null ? 'text' : b.functionCall ? 'tool_use' : b.functionResponse ? 'tool_result' : 'part');
  if (b.text != null && (t === 'text' || t === 'input_text' || t === 'output_text')) return `<pre class="txt">${linked(b.text)}</pre>${mark}`;
  if (t === 'tool_use' || b.functionCall) { const f = b.functionCall || b; return `<div class="call">&#8594; <b>${esc(f.name)}</b>(<code>${esc(JSON.stringify(f.input || f.args || {}))}</code>)</div>${mark}`; }
  if (t === 'tool_result' || b.functionResponse) {
    const inner = b.functionResponse ? JSON.stringify(b.functionResponse.response) : blocksOf(b.content).map(x => x.text != null ? x.text : JSON.stringify(x)).join('\n');
    return `<div class="result">&#8592; result${b.tool_use_id ? ' ' + esc(b.tool_use_id) : ''}${b.is_error ? ' (error)' : ''}<pre class="txt">${linked(inner)}</pre></div>${mark}`;
  }
  if (t === 'image' || t === 'image_url' || b.inlineData) return `<div class="muted">[image]</div>${mark}`;
  return `<pre class="txt">${esc(JSON.stringify(b))}</pre>${mark}`;
}
function requestMessages(body){
  const out = [];
  if (body.system) out.push({role: 'system', blocks: blocksOf(body.system)});
  if (body.instructions) out.push({role: 'system', blocks: blocksOf(body.instructions)});
  if (body.systemInstruction) out.push({role: 'system', blocks: body.systemInstruction.parts || []});
  for (const m of (body.messages || body.input || [])) {
    const blocks = blocksOf(m.content);
    for (const tc of (m.tool_calls || [])) blocks.push({type: 'tool_use', name: tc.function.name, input: (() => { try { return JSON.parse(tc.function.arguments); } catch (e) { return tc.function.arguments; } })()});
    if (m.type === 'function_call') blocks.push({type: 'tool_use', name: m.name, input: m.arguments});
    if (m.type === 'function_call_output') blocks.push({type: 'tool_result', content: m.output});
    out.push({role: m.role || m.type || '?', blocks, id: m.tool_call_id});
  }
  for (const c of (body.contents || [])) out.push({role: c.role, blocks: c.parts || []});
  return out;
}
function loadRequest(){
  api('/api/sessions/' + encodeURIComponent(CFG.session) + '/request').then(r => {
    if (!r.ok) { $('request-note').textContent = r.message; $('request').innerHTML = ''; return; }
    const b = r.body, tools = b.tools || [];
    const key = b.prompt_cache_key ? ` · prompt_cache_key <code>${esc(b.prompt_cache_key)}</code>` : '';
    $('request-note').innerHTML = `${esc(r.provider)} (${esc(r.format)}), pack ${esc(r.pack_id.slice(0, 12))} · ${tools.length} tool${tools.length === 1 ? '' : 's'} · ${esc(r.cache)}${key}`;
    $('request').innerHTML = requestMessages(b).map((m, i) =>
      `<div class="msg role-${esc(m.role)}"><div class="role">${i + 1}. ${esc(m.role)}${m.id ? ' <span class="muted">' + esc(m.id) + '</span>' : ''}</div>${m.blocks.map(renderBlock).join('')}</div>`).join('');
  }).catch(e => { $('request-note').textContent = String(e); });
}

// ------------------------------------------------------------------ what-if
// Horizontal bars: each strategy's cost, with what this session was billed as a dashed line.
function whatifChart(el, rows, billed){
  const W = Math.max(360, Math.min(900, el.clientWidth || 700)), L = 150, R = 70, rowH = 20, T = 18;
  const H = T + rows.length * rowH + 26, pw = W - L - R;
  const hi = Math.max(1e-9, ...rows.map(r => r.cost), billed || 0) * 1.05;
  const x = v => L + v / hi * pw;
  let s = `<svg width="${W}" height="${H}" role="img" aria-label="cost per strategy">`;
  for (const t of ticks(hi, 4)) s += `<line x1="${x(t).toFixed(1)}" x2="${x(t).toFixed(1)}" y1="${T}" y2="${H - 22}" stroke="#eee"/><text class="tick" x="${x(t).toFixed(1)}" y="${H - 8}" text-anchor="middle">$${t.toFixed(hi < 0.2 ? 3 : 2)}</text>`;
  rows.forEach((r, i) => {
    const y = T + i * rowH, fill = r.strategy === 'windowsmith' ? '#2563eb' : '#9ca3af';
    s += `<text x="${L - 6}" y="${y + 14}" text-anchor="end">${esc(r.strategy)}</text>` +
         `<rect x="${L}" y="${y + 3}" width="${(x(r.cost) - L).toFixed(1)}" height="${rowH - 6}" fill="${fill}"><title>${esc(r.strategy)}: ${money(r.cost)}</title></rect>` +
         `<text x="${(x(r.cost) + 4).toFixed(1)}" y="${y + 14}">${money(r.cost)}</text>`;
  });
  if (billed != null) s += `<line x1="${x(billed).toFixed(1)}" x2="${x(billed).toFixed(1)}" y1="${T}" y2="${H - 22}" stroke="#dc2626" stroke-dasharray="5 3" stroke-width="1.5"><title>this session: ${money(billed)}</title></line>` +
    `<text x="${(x(billed) + 3).toFixed(1)}" y="${T - 6}" style="fill:#dc2626" font-size="10">this session (billed)</text>`;
  el.innerHTML = s + '</svg>';
}
function runWhatif(){
  $('whatif-status').textContent = 'replaying this session under each strategy…';
  $('whatif-run').disabled = true;
  api('/api/sessions/' + encodeURIComponent(CFG.session) + '/whatif').then(w => {
    $('whatif-run').disabled = false;
    if (!w.ok) { $('whatif-status').textContent = w.message; $('whatif-table').innerHTML = ''; return; }
    $('whatif-status').textContent = `${w.calls} model calls replayed at a ${num(w.window)}-token window (${num(w.available)} available) on ${w.model}; ${w.targets} identifiers the agent reused from observations.`;
    $('whatif-note').textContent = w.note;
    const base = overview ? overview.cost : null;
    const rows = [[`<b>this session (billed)</b>`, money(base), '', overview ? num(overview.prompt_tokens) : '', overview ? pct(overview.cache_hit_rate) : '', '', '', '', '']];
    for (const r of w.rows) {
      const share = r.input_tokens ? r.cache_read_tokens / r.input_tokens : null;
      const lost = r.lost_count ? `<span title="${esc(r.lost.join(', '))}">${r.lost_count} identifiers on ${r.calls_that_lost} calls</span>` : (r.calls_with_targets ? 'nothing' : '<span class="muted">no identifier to lose</span>');
      rows.push([`<span class="strategy">${esc(r.strategy)}</span>`, `<span class="cost" data-value="${r.cost}">${money(r.cost)}</span>`,
        base == null ? '' : (r.cost - base >= 0 ? '+' : '−') + money(Math.abs(r.cost - base)).slice(0),
        num(r.input_tokens), pct(share), num(r.peak), pct(r.recall_strict), lost, r.error ? esc(r.error) : (r.cuts ? r.cuts + ' cut' : '')]);
    }
    whatifChart($('whatif-chart'), w.rows, base);
    table($('whatif-table'), ['strategy', 'cost', 'vs this session', 'tokens sent', 'cache read', 'peak', 'recall (strict)', 'what it lost', 'notes'], rows);
  }).catch(e => { $('whatif-run').disabled = false; $('whatif-status').textContent = String(e); });
}

function poll(){
  if (!CFG.session) return;
  const sid = encodeURIComponent(CFG.session);
  api('/api/sessions/' + sid).then(d => {
    if (d.head === head) return null;
    return api('/api/sessions/' + sid + '/overview').then(ov => { head = d.head; draw(d, ov); loadSessions(); });
  }).then(() => { $('live').textContent = 'live · updated ' + new Date().toLocaleTimeString(); })
    .catch(e => { $('live').textContent = String(e); })
    .finally(() => setTimeout(poll, CFG.poll_ms));
}
let resizeTimer = null;
window.addEventListener('resize', () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(drawCharts, 120); });
$('search').addEventListener('input', drawSessions);
$('whatif-run').addEventListener('click', runWhatif);
loadSessions().catch(e => { $('session-count').textContent = String(e); });
poll();
