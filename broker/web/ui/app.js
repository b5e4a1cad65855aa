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
  function b64text(b64) {
    try {
      const bin = atob(b64);
      const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
      return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    } catch (e) {
      return '0x' + Array.from(atob(b64).slice(0, 32), (c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join('');
    }
  }
  // sseText is the payload of an SSE message as text: "text" holds a
  // UTF-8 payload, "payload" any other as base64 (docs/pubsub.md).
  function sseText(m) {
    return typeof m.text === 'string' ? m.text : b64text(m.payload || '');
  }
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
      $('who').textContent = s.identity ? 'logged in as ' + s.identity : 'anonymous';
      $('who').dataset.identity = s.identity;
      if (s.filter && $('live-filter').value === '#') $('live-filter').value = s.filter;
      $('logout').hidden = !s.identity;
      $('login').hidden = !!s.identity;
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
      const val = t.encoding === 'base64' ? b64text(t.last) : t.last;
      const tr = el('tr', { class: 'leaf', 'data-topic': t.topic }, name, el('td', { class: 'num count' }, fmtNum(t.count)),
        el('td', { class: 'num rate' }, rate), el('td', { class: 'val', title: val }, val + (t.truncated ? '…' : '')),
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
      const text = sseText(m);
      addRow(m.seq + ' ' + m.topic + (m.retained ? ' [R]' : '') + ': ' + text, m.topic);
      const v = Number(text.trim());
      if (text.trim() !== '' && Number.isFinite(v)) addPoint(m.topic, v);
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
  let dirty = false;
  // draw plots each numeric series in its own band with its own scale
  // (small multiples), so that a humidity in % and a temperature in °C
  // are both readable; time runs along a shared x axis.
  function draw() {
    if (!dirty) return;
    dirty = false;
    const c = $('plot'), dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (c.width !== w * dpr) { c.width = w * dpr; c.height = h * dpr; }
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const fg = getComputedStyle(document.body).color;
    g.fillStyle = fg; g.strokeStyle = fg; g.font = '11px sans-serif';
    if (!series.size) { g.fillText('numeric payloads of the live view are plotted here', 10, 20); $('legend').replaceChildren(); return; }
    let t0 = Infinity, t1 = -Infinity;
    for (const s of series.values()) for (const [t] of s) { t0 = Math.min(t0, t); t1 = Math.max(t1, t); }
    t0 = Math.min(t0, t1 - 10000);
    const L = 52, R = 8, T = 4, B = 16, n = series.size, bandH = (h - T - B) / n;
    const x = (t) => L + (t - t0) / (t1 - t0 || 1) * (w - L - R);
    g.fillText('last ' + Math.round((t1 - t0) / 1000) + ' s', L, h - 3);
    const legend = [];
    let i = 0;
    for (const [topic, s] of series) {
      const col = colors[i % colors.length];
      let v0 = Infinity, v1 = -Infinity;
      for (const [, v] of s) { v0 = Math.min(v0, v); v1 = Math.max(v1, v); }
      if (v0 === v1) { v0 -= 1; v1 += 1; }
      const top = T + i * bandH, pad = Math.min(6, bandH / 6);
      const y = (v) => top + pad + (1 - (v - v0) / (v1 - v0)) * (bandH - 2 * pad);
      g.globalAlpha = 0.25; g.strokeStyle = fg; g.lineWidth = 1;
      g.beginPath(); g.moveTo(L, top + bandH); g.lineTo(w - R, top + bandH); g.moveTo(L, top); g.lineTo(L, top + bandH); g.stroke();
      g.globalAlpha = 1; g.fillStyle = fg;
      g.fillText(String(+v1.toPrecision(4)), 2, top + pad + 8);
      g.fillText(String(+v0.toPrecision(4)), 2, top + bandH - 2);
      g.strokeStyle = col; g.lineWidth = 1.5;
      g.beginPath();
      s.forEach(([t, v], k) => (k ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
      g.stroke();
      if (s.length === 1) { g.fillStyle = col; g.fillRect(x(s[0][0]) - 2, y(s[0][1]) - 2, 4, 4); }
      const sw = el('span', { class: 'sw' }); sw.style.background = col;
      legend.push(el('span', { class: 'lg' }, sw, topic + ' = ' + s[s.length - 1][1]));
      i++;
    }
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
