// The live view of a Piccolo gateway (controlplane/view.go): polls
// /admin/view/state every 2 s and /admin/history when the config version
// changes, with the admin token from the login form or the URL fragment
// (#token=...), kept in sessionStorage and sent as Authorization: Bearer.
// Plain JS and inline SVG: no library, nothing fetched from elsewhere.
'use strict';

const EVERY_MS = 2000;
const KEY = 'piccolo-admin-token';
const HISTORY_POINTS = 90; // the rate sparkline: 3 minutes of polls

let token = null;
let timer = null;
let shownVersion = -1;
const rates = new Map(); // session -> [{measured, planned}]

function $(sel) { return document.querySelector(sel); }

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

function fmtDur(sec) {
  if (sec < 0) return '-';
  if (sec >= 1e8) return '>max';
  if (sec >= 1) return sec.toFixed(2) + ' s';
  if (sec >= 1e-3) return (sec * 1e3).toFixed(1) + ' ms';
  return (sec * 1e6).toFixed(0) + ' µs';
}
function fmtBucket(sec) { return sec < 0 || sec >= 1e8 ? fmtDur(sec) : '≤' + fmtDur(sec); }
function fmtNum(v, d) { return Number(v).toFixed(d === undefined ? 1 : d); }

// stat is one labelled figure; data-k names it and data-v holds the raw
// value (what the browser test compares with /metrics).
function stat(label, k, v, text, cls) {
  return `<div class="stat"><span class="label">${esc(label)}</span>` +
    `<span class="v ${cls || ''}" data-k="${k}" data-v="${v}">${esc(text)}</span></div>`;
}

function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname); // the token leaves the address bar
  }
  return sessionStorage.getItem(KEY);
}

class Refused extends Error {}

async function get(path) {
  const r = await fetch(path, { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
  if (r.status === 401) throw new Refused('the gateway refused the token (HTTP 401)');
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}: ${body.error || ''}`);
  return body;
}

function showLogin(msg) {
  clearTimeout(timer);
  $('#main').hidden = true;
  $('#login').hidden = false;
  $('#summary').textContent = 'not signed in';
  const p = $('#refused');
  p.hidden = !msg;
  p.textContent = msg || '';
}

async function poll() {
  try {
    const st = await get('/admin/view/state');
    $('#login').hidden = true;
    $('#main').hidden = false;
    render(st);
    if (st.config_version !== shownVersion) {
      renderHistory((await get('/admin/history')).changes || []);
      shownVersion = st.config_version;
    }
    $('#error').textContent = '';
  } catch (e) {
    if (e instanceof Refused) {
      sessionStorage.removeItem(KEY);
      showLogin(e.message + ': enter the admin token');
      return;
    }
    $('#error').textContent = 'last poll failed: ' + e.message + ' (retrying)';
  }
  timer = setTimeout(poll, EVERY_MS);
}

function render(st) {
  const L = st.live;
  $('#summary').innerHTML = `plan cost <b data-k="plan_cost" data-v="${L.plan_cost}">${fmtNum(L.plan_cost, 3)}/h</b>` +
    ` · plan age ${fmtDur(L.plan_age_seconds)} · config version <b data-k="config_version" data-v="${st.config_version}">${st.config_version}</b>` +
    ` · figures ${esc(st.window)} (<span data-k="window" data-v="${L.window_seconds}">${fmtNum(L.window_seconds, 0)} s</span>)` +
    ` · updated <span id="updated">${new Date(L.at).toLocaleTimeString()}</span>`;
  const edges = new Map(st.sessions.map((s) => [s.name, s]));
  $('#sessions').innerHTML = L.sessions.map((s) => renderSession(s, edges.get(s.name))).join('');
  $('#calibration').innerHTML = renderCalibration(L.calibration);
}

function renderSession(s, cfg) {
  const roots = s.modules.filter((m) => !(m.after && m.after.length));
  const planned = roots.reduce((a, m) => Math.max(a, m.planned_rate), 0);
  const h = rates.get(s.name) || [];
  h.push({ measured: s.rate_per_sec, planned });
  if (h.length > HISTORY_POINTS) h.shift();
  rates.set(s.name, h);
  const att = s.attainment < 0 ? '-' : (100 * s.attainment).toFixed(2) + '%';
  const attCls = s.attainment < 0 ? '' : s.attainment >= 0.99 ? 'good' : 'bad';
  const d = `data-session="${esc(s.name)}"`;
  return `<section class="session" ${d}>
<h2>${esc(s.name)} <span class="dim">SLO ${fmtDur(s.slo_seconds)}</span>${s.error ? ` <span class="bad">not planned: ${esc(s.error)}</span>` : ''}</h2>
<div class="stats" ${d}>
${stat('rate (req/s)', 'rate', s.rate_per_sec, fmtNum(s.rate_per_sec))}
${stat('planned (req/s)', 'planned_rate', planned, fmtNum(planned))}
${stat('requests', 'requests', s.requests, fmtNum(s.requests, 0))}
${stat('ok', 'ok', s.ok, fmtNum(s.ok, 0))}
${stat('refused (429/503/504)', 'refused', s.refused, fmtNum(s.refused, 0), s.refused > 0 ? 'bad' : '')}
${stat('admission rejections', 'rejected', s.rejected, fmtNum(s.rejected, 0))}
${stat('SLO violations', 'violations', s.violations, fmtNum(s.violations, 0))}
${stat('SLO attainment', 'attainment', s.attainment, att, attCls)}
${stat('p50', 'p50', s.p50_seconds, fmtBucket(s.p50_seconds))}
${stat('p99', 'p99', s.p99_seconds, fmtBucket(s.p99_seconds), s.p99_seconds > s.slo_seconds ? 'bad' : '')}
</div>
<div class="row">${renderDAG(s, cfg)}${sparkline(h)}</div>
${renderModules(s)}
</section>`;
}

// renderDAG draws the session's modules in layers (a module one right of the
// deepest module it comes after), each box with its plan and live figures.
function renderDAG(s, cfg) {
  const after = new Map();
  for (const m of (cfg ? cfg.modules : s.modules)) after.set(m.name, m.after || []);
  const depth = new Map();
  const level = (n, seen) => {
    if (depth.has(n)) return depth.get(n);
    if (seen.has(n)) return 0;
    seen.add(n);
    const d = Math.max(-1, ...(after.get(n) || []).map((p) => level(p, seen))) + 1;
    depth.set(n, d);
    return d;
  };
  const cols = [];
  for (const m of s.modules) {
    const d = level(m.name, new Set());
    (cols[d] = cols[d] || []).push(m);
  }
  const W = 250, H = 78, GX = 50, GY = 16;
  const pos = new Map();
  cols.forEach((col, x) => col.forEach((m, y) => pos.set(m.name, { x: x * (W + GX) + 4, y: y * (H + GY) + 4 })));
  const width = Math.max(1, cols.length) * (W + GX) - GX + 8;
  const height = Math.max(1, ...cols.map((c) => c.length)) * (H + GY) - GY + 8;
  let out = `<svg class="dag" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="DAG of ${esc(s.name)}">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#5b7db1"/></marker></defs>`;
  for (const m of s.modules) {
    for (const p of after.get(m.name) || []) {
      const a = pos.get(p), b = pos.get(m.name);
      if (a && b) out += `<path class="edge" d="M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}"/>`;
    }
  }
  for (const m of s.modules) {
    const p = pos.get(m.name);
    const conf = m.configs.map((g) => `${g.hardware}×${fmtNum(g.machines, 2)} b${g.batch}`).join(', ') || 'no machines';
    const frac = m.planned_rate > 0 ? Math.min(1.5, m.measured_rate / m.planned_rate) : 0;
    const bar = Math.round((W - 16) * frac / 1.5);
    const barCls = frac > 1 ? '#b3261e' : '#1e7b34';
    out += `<g transform="translate(${p.x},${p.y})" data-module="${esc(m.name)}">
<rect class="box" width="${W}" height="${H}" rx="5"/>
<text x="8" y="16"><tspan font-weight="600">${esc(m.name)}</tspan> <tspan fill="#6a7280">${esc(m.model || '')}</tspan></text>
<text x="8" y="32">${esc(conf)}</text>
<text x="8" y="48">${fmtNum(m.measured_rate)} of ${fmtNum(m.planned_rate)} req/s · queue ${fmtNum(m.outstanding, 0)}</text>
<rect x="8" y="56" width="${W - 16}" height="8" fill="#dde3ec"/><rect x="8" y="56" width="${bar}" height="8" fill="${barCls}"/>
<line x1="${8 + Math.round((W - 16) / 1.5)}" y1="53" x2="${8 + Math.round((W - 16) / 1.5)}" y2="67" stroke="#1d2330"/>
<text x="8" y="75" font-size="10" fill="#6a7280">budget ${fmtDur(m.budget_seconds)} · compute p50 ${fmtBucket(m.compute_p50_seconds)}</text>
</g>`;
  }
  return out + '</svg>';
}

// sparkline draws the session's measured request rate (polls of the last
// minute's rate) against its planned rate.
function sparkline(h) {
  const W = 260, H = 90;
  const max = Math.max(1e-9, ...h.map((p) => Math.max(p.measured, p.planned))) * 1.1;
  const pts = (k) => h.map((p, i) => `${(i * W / (HISTORY_POINTS - 1)).toFixed(1)},${(H - p[k] / max * H).toFixed(1)}`).join(' ');
  return `<figure><svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" style="background:#fff;border:1px solid #dde">
<polyline points="${pts('planned')}" fill="none" stroke="#6a7280" stroke-dasharray="4 3"/>
<polyline points="${pts('measured')}" fill="none" stroke="#1f5fbf" stroke-width="2"/></svg>
<figcaption class="legend">request rate (blue) against planned (dashed), 0–${fmtNum(max, 1)} req/s</figcaption></figure>`;
}

function renderModules(s) {
  const rows = s.modules.map((m) => {
    const d = `data-session="${esc(s.name)}" data-module="${esc(m.name)}"`;
    const conf = m.configs.map((g) =>
      `${esc(g.hardware)} ×${fmtNum(g.machines, 3)} · batch ${g.batch} · conc ${g.concurrency} · profiled ${fmtDur(g.duration_ms / 1000)}` +
      (g.backends && g.backends.length ? ` · on ${g.backends.map(esc).join(', ')}` : '')).join('<br>') || '-';
    const v = (k, val, text) => `<td ${d} data-k="${k}" data-v="${val}">${text}</td>`;
    return `<tr><td class="l">${esc(m.name)}</td><td class="l">${esc(m.model || '')}</td><td class="l">${conf}</td>
${v('planned_rate', m.planned_rate, fmtNum(m.planned_rate))}${v('dummy_rate', m.dummy_rate, fmtNum(m.dummy_rate))}
${v('measured_rate', m.measured_rate, fmtNum(m.measured_rate))}${v('outstanding', m.outstanding, fmtNum(m.outstanding, 0))}
${v('queue_p50', m.queue_p50_seconds, fmtBucket(m.queue_p50_seconds))}${v('compute_p50', m.compute_p50_seconds, fmtBucket(m.compute_p50_seconds))}
${v('compute_p99', m.compute_p99_seconds, fmtBucket(m.compute_p99_seconds))}
${v('mean_batch', m.mean_batch, m.mean_batch < 0 ? '-' : fmtNum(m.mean_batch))}
<td>${fmtDur(m.budget_seconds)}</td><td>${fmtDur(m.wcl_seconds)}</td></tr>`;
  }).join('');
  return `<table><thead><tr><th>module</th><th>model</th><th class="l">plan: configs (machines, batch, concurrency, profiled duration)</th>
<th>planned req/s</th><th>dummy/s</th><th>measured req/s</th><th>queue now</th><th>queue p50</th><th>compute p50</th><th>compute p99</th><th>mean batch</th><th>budget</th><th>WCL</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function renderCalibration(c) {
  if (!c.length) return '<p class="dim">No calibration: the gateway runs with --calibration=false, or has run no batch yet.</p>';
  const rows = c.map((x) => {
    const ratio = x.profiled_seconds > 0 ? x.measured_seconds / x.profiled_seconds : 0;
    return `<tr data-model="${esc(x.model)}" data-device="${esc(x.device)}"><td class="l">${esc(x.model)}</td><td class="l">${esc(x.device)}</td><td class="l">${esc(x.hardware)}</td>
<td>${esc(x.batch)}</td><td>${x.profiled_seconds > 0 ? fmtDur(x.profiled_seconds) : '-'}</td><td>${fmtDur(x.measured_seconds)}</td>
<td class="${ratio > 1.2 ? 'bad' : ''}">${ratio > 0 ? '×' + ratio.toFixed(2) : '-'}</td><td>${fmtNum(x.samples, 0)}</td></tr>`;
  }).join('');
  return `<table><thead><tr><th>model</th><th class="l">device</th><th class="l">hardware</th><th>batch</th><th>profiled</th><th>measured (p90)</th><th>ratio</th><th>batches</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function renderHistory(changes) {
  const rows = changes.slice().reverse().map((c, i) => {
    const diff = (c.diff || '').split('\n').map((l) =>
      `<span class="${l.startsWith('+') && !l.startsWith('+++') ? 'add' : l.startsWith('-') && !l.startsWith('---') ? 'del' : ''}">${esc(l)}</span>`).join('\n');
    return `<tr data-version="${c.version}"><td>${c.version}</td><td class="l">${new Date(c.at).toLocaleString()}</td><td class="l">${esc(c.who)}</td>
<td class="l">${esc(c.cause)}${c.note ? ' · ' + esc(c.note) : ''}</td><td class="l">${(c.sessions || []).map(esc).join(', ') || '-'}</td><td>${fmtNum(c.plan_cost, 3)}</td>
<td class="l">${c.diff ? `<details${i === 0 ? ' open' : ''}><summary>diff</summary><pre class="diff">${diff}</pre></details>` : '-'}</td></tr>`;
  }).join('');
  $('#history').innerHTML = `<table><thead><tr><th>version</th><th class="l">at</th><th class="l">who</th><th class="l">cause</th><th class="l">sessions changed</th><th>plan cost/h</th><th class="l">diff</th></tr></thead><tbody>${rows}</tbody></table>`;
}

document.addEventListener('DOMContentLoaded', () => {
  $('#login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('#token').value.trim();
    sessionStorage.setItem(KEY, token);
    shownVersion = -1;
    poll();
  });
  token = readToken();
  if (!token) {
    showLogin('');
    return;
  }
  poll();
});
