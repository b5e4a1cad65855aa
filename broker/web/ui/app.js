// quiot dashboard: plain JavaScript, no framework, no CDN.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 1000;
  const prev = { topics: new Map(), protos: new Map(), t: 0 };
  let es = null;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === 'class') e.className = attrs[k];
      else if (k.startsWith('data-')) e.setAttribute(k, attrs[k]);
      else e[k] = attrs[k];
    }
    for (const c of kids) e.append(c);
    return e;
  }
  function setProto(id, p) {
    const b = $(id);
    const short = /^HTTP\/3|^h3/.test(p) ? 'h3' : /^HTTP\/2|^h2/.test(p) ? 'h2' : p || '?';
    b.textContent = 'via ' + short;
    b.title = p;
    b.className = 'proto ' + short;
    b.dataset.proto = short;
  }
  function fmtNum(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(1) + 'G';
    if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
    if (n >= 1e4) return (n / 1e3).toFixed(1) + 'k';
    return String(n);
  }
  function fmtBytes(n) {
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + ' MiB';
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + ' KiB';
    return n + ' B';
  }
  function fmtAge(ms) {
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 60) return s.toFixed(0) + 's';
    if (s < 3600) return (s / 60).toFixed(0) + 'm';
    return (s / 3600).toFixed(1) + 'h';
  }
  // --- payloads (pure functions, window.quiotDashboard for tests) -------
  // decodePayload reads a message's payload: its "text" field (UTF-8
  // text, when the broker sends it so) or else its base64 "payload".
  // It returns {text: the text, or null for binary; bytes: the raw bytes,
  // or null when the payload came as text}.
  function decodePayload(m) {
    if (typeof m.text === 'string') return { text: m.text, bytes: null };
    let bytes;
    try {
      bytes = Uint8Array.from(atob(m.payload || ''), (c) => c.charCodeAt(0));
    } catch (e) {
      return { text: null, bytes: new Uint8Array(0) };
    }
    try {
      return { text: new TextDecoder('utf-8', { fatal: true }).decode(bytes), bytes };
    } catch (e) {
      return { text: null, bytes };
    }
  }
  const CONTROL = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/;
  const HEX_BYTES = 32;
  // payloadText is how a decoded payload is shown: its text, or (binary,
  // or text with control characters) its size and first bytes in hex,
  // "[3 bytes] 00 01 ff". size, when given, is the full payload's size
  // (the bytes may be a prefix).
  function payloadText(p, size) {
    if (p.text !== null && !CONTROL.test(p.text)) return p.text;
    const b = p.bytes || new TextEncoder().encode(p.text);
    const n = size === undefined ? b.length : size;
    const hex = Array.from(b.subarray(0, HEX_BYTES), (x) => x.toString(16).padStart(2, '0')).join(' ');
    return '[' + n + (n === 1 ? ' byte] ' : ' bytes] ') + hex + (n > Math.min(b.length, HEX_BYTES) ? ' …' : '');
  }
  // A payload is plotted when it is a decimal number as text ("21.5",
  // "-3", "1e6", a JSON number), nothing else: no hex ("0x10"), no
  // "Infinity", no empty text, and never a binary payload.
  const DECIMAL = /^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*$/;
  // plotValue returns the number a decoded payload stands for, or null.
  function plotValue(p) {
    if (p.text === null || !DECIMAL.test(p.text)) return null;
    const v = Number(p.text);
    return Number.isFinite(v) ? v : null;
  }
  // axisLabel writes a y-axis bound short: 4 significant digits, 3 with
  // k/M/G/T from 10000 up, an exponent below 0.001; extra adds digits.
  function axisLabel(v, extra) {
    const a = Math.abs(v), x = extra || 0;
    if (a >= 1e4) {
      for (const [d, u] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) {
        if (a >= d) return String(+(v / d).toPrecision(3 + x)) + u;
      }
    }
    if (a !== 0 && a < 1e-3) return v.toExponential(1 + x);
    return String(+v.toPrecision(4 + x));
  }
  // axisLabels writes a band's bounds v0 < v1 with as many digits as it
  // takes to tell them apart (101.3k and 101.4k, not 101k twice).
  function axisLabels(v0, v1) {
    let lo, hi;
    for (let x = 0; x <= 6; x++) {
      lo = axisLabel(v0, x); hi = axisLabel(v1, x);
      if (lo !== hi) break;
    }
    return [lo, hi];
  }
  // plotLayout places n bands (one per series) on a canvas w CSS pixels
  // wide whose y-axis labels are at most labelW wide: each band is at
  // least BAND_MIN high, bands are GAP apart (so the labels of
  // neighbouring bands never touch), and the canvas grows with n.
  const BAND_MIN = 48, GAP = 12, MIN_H = 220;
  function plotLayout(w, n, labelW) {
    const L = Math.ceil(labelW) + 8, R = 8, T = 4, B = 16;
    const h = Math.max(MIN_H, T + B + n * BAND_MIN + Math.max(0, n - 1) * GAP);
    const bandH = n ? (h - T - B - (n - 1) * GAP) / n : 0;
    const bands = [];
    for (let i = 0; i < n; i++) bands.push({ top: T + i * (bandH + GAP), h: bandH });
    return { L, R, T, B, w, h, bands };
  }
  window.quiotDashboard = Object.freeze({ decodePayload, payloadText, plotValue, axisLabel, axisLabels, plotLayout });

  // topicURL names a topic or filter as one percent-encoded path segment;
  // the topics "." and ".." (dot segments in any URL) go in ?topic=.
  function topicURL(t, query) {
    if (t === '.' || t === '..') return '/v1/topics?topic=' + encodeURIComponent(t) + (query ? '&' + query : '');
    return '/v1/topics/' + encodeURIComponent(t) + (query ? '?' + query : '');
  }
  function showErr(msg) { $('err').textContent = msg || ''; }

  async function getJSON(url) {
    const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
    if (!r.ok) throw new Error(url + ': ' + r.status + ' ' + (await r.text()).trim());
    return r.json();
  }

  // --- session -------------------------------------------------------
  async function whoami() {
    try {
      const s = await getJSON('/v1/session');
      // An open broker (no ACL) has no one to log in as: no login form.
      $('who').textContent = s.identity ? 'logged in as ' + s.identity : s.open ? 'open broker, no login' : 'anonymous';
      $('who').dataset.identity = s.identity;
      if (s.filter && $('live-filter').value === '#') $('live-filter').value = s.filter;
      $('logout').hidden = !s.identity;
      $('login').hidden = !!s.identity || !!s.open;
    } catch (e) {
      $('who').textContent = 'not logged in';
      $('login').hidden = false;
    }
  }
  function b64utf8(s) {
    return btoa(String.fromCharCode(...new TextEncoder().encode(s)));
  }
  $('login').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const u = $('login-user').value, p = $('login-pass').value;
    const auth = u ? 'Basic ' + b64utf8(u + ':' + p) : 'Bearer ' + p;
    const r = await fetch('/v1/session', { method: 'POST', headers: { Authorization: auth }, credentials: 'same-origin' });
    if (!r.ok) { showErr('login: ' + (await r.text()).trim()); return; }
    showErr('');
    $('login-pass').value = '';
    await whoami();
    startLive();
  });
  $('logout').addEventListener('click', async () => {
    await fetch('/v1/session', { method: 'DELETE', credentials: 'same-origin' });
    location.reload();
  });

  // --- health ----------------------------------------------------------
  function card(label, value) {
    return el('div', { class: 'card' }, el('b', {}, value), el('span', {}, label));
  }
  async function pollStats(now) {
    let s;
    try { s = await getJSON('/v1/stats'); } catch (e) { $('health').textContent = e.message; return; }
    setProto('health-proto', s.proto);
    const b = s.broker, h = $('health');
    h.replaceChildren(
      card('uptime', fmtAge(Date.now() - s.uptime_s * 1000)),
      card('subscriptions', fmtNum(b.Subscriptions)),
      card('topics', fmtNum(b.Topics)),
      card('retained', fmtNum(b.Retained) + ' / ' + fmtBytes(b.RetainedBytes)),
      card('history', fmtNum(b.HistoryMessages) + ' / ' + fmtBytes(b.HistoryBytes)),
      card('queued (max)', b.QueueDepthSum + ' (' + b.QueueDepthMax + ')'),
      card('dropped', fmtNum(b.Dropped)),
      card('cut off', fmtNum(b.CutOff)),
      card('last seq', fmtNum(b.LastSeq)),
      card('heap', fmtBytes(b.HeapBytes || 0)),
      card('goroutines', fmtNum(b.Goroutines || 0)),
    );
    const dt = prev.t ? (now - prev.t) / 1000 : 0;
    const rows = [];
    for (const name of Object.keys(b.Protocols || {}).sort()) {
      const p = b.Protocols[name], q = prev.protos.get(name);
      const rin = q && dt > 0 ? ((p.MessagesIn - q.MessagesIn) / dt).toFixed(1) : '';
      const rout = q && dt > 0 ? ((p.MessagesOut - q.MessagesOut) / dt).toFixed(1) : '';
      prev.protos.set(name, p);
      rows.push(el('tr', { 'data-proto': name }, el('td', {}, name), el('td', { class: 'num' }, String(p.ConnsOpen)),
        el('td', { class: 'num' }, fmtNum(p.ConnsTotal)), el('td', { class: 'num' }, fmtNum(p.MessagesIn)), el('td', { class: 'num' }, rin),
        el('td', { class: 'num' }, fmtNum(p.MessagesOut)), el('td', { class: 'num' }, rout)));
    }
    $('protos').tBodies[0].replaceChildren(...rows);
    // Bridges (docs/bridge.md): connected since, or down since (degraded
    // once down longer than its down_alert, as /healthz says).
    const brs = b.Bridges || [];
    $('bridges').hidden = brs.length === 0;
    $('bridges').tBodies[0].replaceChildren(...brs.map((x) => {
      const state = x.Connected ? 'up ' + fmtAge(Date.parse(x.ConnectedSince))
        : (x.Degraded ? 'degraded, down ' : 'down ') + (x.DownSince ? fmtAge(Date.parse(x.DownSince)) : '');
      const err = el('td', { class: 'val', title: x.Degraded || x.LastError || '' }, x.LastError || '');
      return el('tr', { 'data-bridge': x.Name, class: x.Connected ? '' : (x.Degraded ? 'bad' : 'down') },
        el('td', {}, x.Name), el('td', {}, x.URL), el('td', { class: 'state' }, state),
        el('td', { class: 'num' }, fmtNum(x.Queued)), el('td', { class: 'num' }, fmtNum(x.Sent)),
        el('td', { class: 'num' }, fmtNum(x.Dropped)), err);
    }));
  }

  // --- topic tree ------------------------------------------------------
  async function pollTopics(now) {
    let s;
    try { s = await getJSON('/v1/stats/topics'); } catch (e) { $('topics-note').textContent = e.message; return; }
    setProto('topics-proto', s.proto);
    const dt = prev.t ? (now - prev.t) / 1000 : 0;
    const rows = [];
    const seen = new Set();
    for (const t of s.topics) {
      const levels = t.topic.split('/');
      for (let i = 1; i < levels.length; i++) {
        const node = levels.slice(0, i).join('/');
        if (seen.has(node)) continue;
        seen.add(node);
        const td = el('td', {}, levels[i - 1] + '/');
        td.style.paddingLeft = (i - 1) * 1.1 + 0.4 + 'em';
        rows.push(el('tr', { class: 'node' }, td, el('td'), el('td'), el('td'), el('td'), el('td'), el('td')));
      }
      seen.add(t.topic);
      const q = prev.topics.get(t.topic);
      const rate = q !== undefined && dt > 0 ? ((t.count - q) / dt).toFixed(1) : '';
      prev.topics.set(t.topic, t.count);
      const name = el('td', { title: t.topic }, levels[levels.length - 1] || '(empty)');
      name.style.paddingLeft = (levels.length - 1) * 1.1 + 0.4 + 'em';
      const last = decodePayload(t.encoding === 'base64' ? { payload: t.last } : { text: t.last });
      const val = payloadText(last, t.size) + (t.truncated && payloadText(last) === last.text ? '…' : '');
      const tr = el('tr', { class: 'leaf', 'data-topic': t.topic }, name, el('td', { class: 'num count' }, fmtNum(t.count)),
        el('td', { class: 'num rate' }, rate), el('td', { class: 'val', title: val }, val),
        el('td', { class: 'ret' }, t.retained ? 'R' : ''), el('td', {}, t.origin), el('td', { class: 'num' }, fmtAge(t.time)));
      tr.addEventListener('click', () => { $('live-filter').value = t.topic; $('pub-topic').value = t.topic; startLive(); });
      rows.push(tr);
    }
    $('topics').tBodies[0].replaceChildren(...rows);
    const notes = [];
    if (s.hidden) notes.push(s.hidden + ' topics hidden by the ACL');
    if (s.untracked) notes.push(s.untracked + ' messages to untracked topics');
    $('topics-note').textContent = notes.join('; ');
  }

  // --- live view and plot ---------------------------------------------
  const series = new Map(); // topic -> [[t, v]]
  const colors = ['#0b6bcb', '#d35400', '#2a8a2a', '#8e44ad', '#c0392b', '#16a085', '#7f8c8d', '#b7950b'];
  const MAX_POINTS = 300, MAX_SERIES = 8, MAX_ROWS = 100;

  function startLive() {
    if (es) es.close();
    const filter = $('live-filter').value || '#';
    series.clear();
    $('live').replaceChildren();
    $('live-state').textContent = 'connecting…';
    es = new EventSource(topicURL(filter, 'proto=1'));
    es.addEventListener('proto', (e) => {
      const p = JSON.parse(e.data);
      setProto('live-proto', p.proto);
      if (p.lastEventId) addRow('resumed after ' + p.lastEventId);
    });
    es.addEventListener('open', () => { $('live-state').textContent = 'subscribed to ' + filter; });
    const mine = es;
    es.addEventListener('error', async () => {
      if (mine.readyState !== EventSource.CLOSED) { $('live-state').textContent = 'reconnecting…'; return; }
      // EventSource hides why: ask again with fetch to show the broker's reason.
      const ac = new AbortController();
      try {
        const r = await fetch(topicURL(filter, ''), { credentials: 'same-origin', signal: ac.signal, headers: { Accept: 'text/event-stream' } });
        $('live-state').textContent = r.ok ? 'closed' : 'refused: ' + r.status + ' ' + (await r.text()).trim();
      } catch (e) {
        $('live-state').textContent = 'closed';
      } finally { ac.abort(); }
    });
    es.addEventListener('gap', (e) => {
      const g = JSON.parse(e.data);
      addRow('gap ' + (g.topic || '') + ' ' + g.from + '…' + g.to);
    });
    es.addEventListener('message', (e) => {
      const m = JSON.parse(e.data);
      const p = decodePayload(m);
      addRow(m.seq + ' ' + m.topic + (m.retained ? ' [R]' : '') + ': ' + payloadText(p), m.topic);
      const v = plotValue(p);
      if (v !== null) addPoint(m.topic, v);
    });
  }
  function addRow(text, topic) {
    const ol = $('live');
    const li = el('li', {}, text);
    if (topic) li.dataset.topic = topic;
    ol.prepend(li);
    while (ol.children.length > MAX_ROWS) ol.lastChild.remove();
  }
  function addPoint(topic, v) {
    let s = series.get(topic);
    if (!s) {
      if (series.size >= MAX_SERIES) return;
      s = [];
      series.set(topic, s);
    }
    s.push([Date.now(), v]);
    if (s.length > MAX_POINTS) s.shift();
    dirty = true;
  }
  let dirty = false, drawnW = 0;
  // draw plots each numeric series in its own band with its own scale
  // (small multiples), so that a humidity in % and a temperature in °C
  // are both readable; time runs along a shared x axis. The canvas grows
  // with the number of bands (plotLayout), and the y-axis labels sit
  // right-aligned left of the plot, the upper bound at a band's top, the
  // lower at its bottom. The labels' boxes go to the canvas's
  // data-labels (JSON, CSS pixels) for the tests.
  function draw() {
    const c = $('plot');
    if (!dirty && c.clientWidth === drawnW) return;
    dirty = false;
    const dpr = window.devicePixelRatio || 1, w = c.clientWidth;
    drawnW = w;
    const g = c.getContext('2d');
    const fg = getComputedStyle(document.body).color;
    g.font = '11px sans-serif';
    const ranges = [];
    let labelW = 0;
    for (const [topic, s] of series) {
      let v0 = Infinity, v1 = -Infinity;
      for (const [, v] of s) { v0 = Math.min(v0, v); v1 = Math.max(v1, v); }
      if (v0 === v1) { v0 -= 1; v1 += 1; }
      const [lo, hi] = axisLabels(v0, v1);
      labelW = Math.max(labelW, g.measureText(hi).width, g.measureText(lo).width);
      ranges.push({ topic, s, v0, v1, hi, lo });
    }
    const lay = plotLayout(w, series.size, labelW), h = lay.h;
    const css = h + c.offsetHeight - c.clientHeight + 'px'; // the CSS height holds the border
    if (c.style.height !== css) c.style.height = css;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) { c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = '11px sans-serif';
    g.fillStyle = fg; g.strokeStyle = fg; g.textAlign = 'left'; g.textBaseline = 'alphabetic';
    const boxes = [];
    c.dataset.labels = '[]';
    if (!series.size) { g.fillText('numeric payloads of the live view are plotted here', 10, 20); $('legend').replaceChildren(); return; }
    let t0 = Infinity, t1 = -Infinity;
    for (const s of series.values()) for (const [t] of s) { t0 = Math.min(t0, t); t1 = Math.max(t1, t); }
    t0 = Math.min(t0, t1 - 10000);
    const { L, R } = lay;
    const x = (t) => L + (t - t0) / (t1 - t0 || 1) * (w - L - R);
    g.fillText('last ' + Math.round((t1 - t0) / 1000) + ' s', L, h - 3);
    // label writes one y-axis label right-aligned at the plot's left edge
    // and records its box.
    const label = (text, y, baseline) => {
      g.textAlign = 'right'; g.textBaseline = baseline;
      g.fillText(text, L - 4, y);
      const m = g.measureText(text);
      boxes.push({ X: L - 4 - m.actualBoundingBoxLeft, Y: y - m.actualBoundingBoxAscent,
        W: m.actualBoundingBoxLeft + m.actualBoundingBoxRight, H: m.actualBoundingBoxAscent + m.actualBoundingBoxDescent });
    };
    const legend = [];
    ranges.forEach(({ topic, s, v0, v1, hi, lo }, i) => {
      const col = colors[i % colors.length];
      const { top, h: bandH } = lay.bands[i], pad = Math.min(6, bandH / 6);
      const y = (v) => top + pad + (1 - (v - v0) / (v1 - v0)) * (bandH - 2 * pad);
      g.globalAlpha = 0.25; g.strokeStyle = fg; g.lineWidth = 1;
      g.beginPath(); g.moveTo(L, top + bandH); g.lineTo(w - R, top + bandH); g.moveTo(L, top); g.lineTo(L, top + bandH); g.stroke();
      g.globalAlpha = 1; g.fillStyle = fg;
      label(hi, top + 1, 'top');
      label(lo, top + bandH - 1, 'bottom');
      g.strokeStyle = col; g.lineWidth = 1.5;
      g.beginPath();
      s.forEach(([t, v], k) => (k ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
      g.stroke();
      if (s.length === 1) { g.fillStyle = col; g.fillRect(x(s[0][0]) - 2, y(s[0][1]) - 2, 4, 4); }
      const sw = el('span', { class: 'sw' }); sw.style.background = col;
      legend.push(el('span', { class: 'lg', 'data-topic': topic }, sw, topic + ' = ' + s[s.length - 1][1]));
    });
    c.dataset.labels = JSON.stringify(boxes);
    $('legend').replaceChildren(...legend);
  }

  // --- publish -----------------------------------------------------------
  // The protocol of a publish comes from its resource timing entry, which
  // the browser adds once the response is complete.
  const pubURLs = new Set();
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (pubURLs.has(e.name) && e.nextHopProtocol) { setProto('pub-proto', e.nextHopProtocol); pubURLs.delete(e.name); }
    }
  }).observe({ type: 'resource', buffered: true });
  $('pub-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const topic = $('pub-topic').value;
    if (!topic) { $('pub-result').textContent = 'topic?'; return; }
    const url = topicURL(topic, 'qos=' + $('pub-qos').value + ($('pub-retain').checked ? '&retain=1' : ''));
    const r = await fetch(url, { method: 'POST', body: $('pub-payload').value, credentials: 'same-origin', headers: { 'Quiot-Time': String(Date.now() * 1e6) } });
    pubURLs.add(new URL(url, location.href).href);
    $('pub-result').textContent = r.ok ? 'accepted, seq ' + r.headers.get('Quiot-Seq') : r.status + ' ' + (await r.text()).trim();
  });
  $('live-form').addEventListener('submit', (ev) => { ev.preventDefault(); startLive(); });

  async function tick() {
    const now = Date.now();
    await Promise.all([pollStats(now), pollTopics(now)]);
    prev.t = now;
    setTimeout(tick, POLL_MS);
  }
  function frame() { draw(); requestAnimationFrame(frame); }

  whoami().then(() => { startLive(); tick(); });
  dirty = true;
  requestAnimationFrame(frame);
})();
