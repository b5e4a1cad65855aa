// MQTT.js (npm "mqtt", the version scripts/deps.sh pins) against quiot's
// MQTT over WebSocket listeners, driven by ws_test.go.
//
//   node mqttjs.mjs suite   URL VERSION TAG    QoS 0/1/2, retained, will,
//                                              persistent session (TAG
//                                              names topics and clients)
//   node mqttjs.mjs sub     URL VERSION FILTER prints "subscribed", then
//                                              each message as a JSON line
//   node mqttjs.mjs connect URL VERSION        prints "connack" or "refused <code>"
//   node mqttjs.mjs fanout  URL VERSION NSUBS  deliveries/s (BENCH_MSGS messages)
//   node mqttjs.mjs latency URL VERSION N      p50/p99/max at 100 msg/s
//   node mqttjs.mjs will    URL VERSION TAG    (child of suite) connects
//                                              with a will, then waits
//
// Environment: MQTTJS_DIR (the npm prefix holding node_modules/mqtt),
// CA_FILE (PEM of the CA that signed the broker's certificate, for wss://),
// MQTT_USER, MQTT_PASS, MQTT_ORIGIN (an Origin header), ECHO_TOPIC (sub:
// publish each message received there too).
import { createRequire } from 'node:module';
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const require = createRequire(process.env.MQTTJS_DIR + '/');
const mqtt = require('mqtt');
const ca = process.env.CA_FILE ? readFileSync(process.env.CA_FILE) : undefined;
const WAIT_MS = 30000; // bounds a wait that never ends (a hang), not a timing

const [mode, url, versionArg, arg] = process.argv.slice(2);
const version = Number(versionArg);

function fail(msg) {
  console.error(`mqttjs: ${msg}`);
  process.exit(1);
}

function options(extra) {
  const o = { ca, protocolVersion: version, reconnectPeriod: 0, connectTimeout: WAIT_MS, ...extra };
  if (process.env.MQTT_USER) o.username = process.env.MQTT_USER;
  if (process.env.MQTT_PASS) o.password = process.env.MQTT_PASS;
  if (process.env.MQTT_ORIGIN) o.wsOptions = { headers: { Origin: process.env.MQTT_ORIGIN } };
  return o;
}

// connect resolves with the connected client (its CONNACK as c.connack)
// or rejects with the error (a refused CONNACK carries its code). setup,
// when given, gets the client before it connects (to see messages sent
// right after CONNACK).
function connect(extra, setup) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, options(extra));
    if (setup) setup(c);
    // MQTT.js does not emit a WebSocket upgrade refusal (an error without
    // a code) as 'error'; its stream does.
    let streamErr;
    c.stream.on('error', (e) => { streamErr = e; });
    c.once('connect', (connack) => { c.connack = connack; resolve(c); });
    c.once('error', (e) => { c.end(true); reject(e); });
    c.once('close', () => reject(streamErr || new Error('connection closed before CONNACK')));
  });
}

function bounded(p, what) {
  let timer;
  const t = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no ${what} within ${WAIT_MS} ms`)), WAIT_MS); });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

// inbox collects a client's messages; next waits for one that matches.
function inbox(c) {
  const got = [];
  const waiting = [];
  c.on('message', (topic, payload, packet) => {
    const m = { topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain };
    const i = waiting.findIndex((w) => w.pred(m));
    if (i >= 0) waiting.splice(i, 1)[0].resolve(m);
    else got.push(m);
  });
  return {
    next(pred, what) {
      const i = got.findIndex(pred);
      if (i >= 0) return Promise.resolve(got.splice(i, 1)[0]);
      return bounded(new Promise((resolve) => waiting.push({ pred, resolve })), what);
    },
  };
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

async function suite() {
  const tag = arg;
  const p = `wsjs/${tag}/`;
  const sub = await connect({ clientId: `sub-${tag}` });
  const got = inbox(sub);
  const granted = await sub.subscribeAsync(p + '#', { qos: 2 });
  check(granted[0].qos === 2, `granted ${JSON.stringify(granted)}, want QoS 2`);
  const pub = await connect({ clientId: `pub-${tag}` });
  for (const qos of [0, 1, 2]) {
    const topic = `${p}q${qos}`;
    await pub.publishAsync(topic, `hello ${qos}`, { qos });
    const m = await got.next((m) => m.topic === topic, `QoS ${qos} message`);
    check(m.payload === `hello ${qos}` && m.qos === qos, `QoS ${qos}: got ${JSON.stringify(m)}`);
    console.log(`ok ${tag} qos${qos}`);
  }

  await pub.publishAsync(p + 'ret', 'kept', { qos: 1, retain: true });
  await got.next((m) => m.topic === p + 'ret', 'retained message (live)');
  const late = await connect({ clientId: `late-${tag}` });
  const lateGot = inbox(late);
  await late.subscribeAsync(p + 'ret', { qos: 1 });
  const r = await lateGot.next((m) => m.topic === p + 'ret', 'retained message (replayed)');
  check(r.retain && r.payload === 'kept', `retained: got ${JSON.stringify(r)}`);
  await pub.publishAsync(p + 'ret', '', { qos: 1, retain: true }); // clear it
  console.log(`ok ${tag} retained`);

  // A client with a will, killed (SIGKILL: no DISCONNECT, no close frame).
  const child = fork(fileURLToPath(import.meta.url), ['will', url, String(version), tag], { stdio: 'inherit' });
  await bounded(new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`will client exited (${code}) before connecting`)));
  }), 'will client connection');
  child.removeAllListeners('exit');
  child.kill('SIGKILL');
  const w = await got.next((m) => m.topic === p + 'will', 'will message');
  check(w.payload === `gone ${tag}`, `will: got ${JSON.stringify(w)}`);
  console.log(`ok ${tag} will`);

  // A persistent session: its client leaves, a QoS 1 message published
  // meanwhile is queued, and delivered when the client comes back.
  const keep = { clientId: `keep-${tag}`, clean: false };
  if (version === 5) keep.properties = { sessionExpiryInterval: 300 };
  const k1 = await connect(keep);
  await k1.subscribeAsync(p + 'queued', { qos: 1 });
  await k1.endAsync();
  await pub.publishAsync(p + 'queued', 'while away', { qos: 1 });
  let kGot;
  const k2 = await connect(keep, (c) => { kGot = inbox(c); });
  check(k2.connack.sessionPresent, `persistent session: CONNACK ${JSON.stringify(k2.connack)}, want session present`);
  const q = await kGot.next((m) => m.topic === p + 'queued', 'queued message');
  check(q.payload === 'while away' && q.qos === 1, `queued: got ${JSON.stringify(q)}`);
  console.log(`ok ${tag} session`);

  await Promise.all([sub.endAsync(), pub.endAsync(), late.endAsync(), k2.endAsync()]);
}

async function will() {
  const tag = arg;
  await connect({ clientId: `will-${tag}`, will: { topic: `wsjs/${tag}/will`, payload: Buffer.from(`gone ${tag}`), qos: 1 } });
  process.send('connected');
  setInterval(() => {}, 1 << 30); // until killed
}

async function sub() {
  const c = await connect({ clientId: `h3sub-${version}-${process.pid}` });
  c.on('message', async (topic, payload) => {
    console.log(JSON.stringify({ topic, payload: payload.toString() }));
    if (process.env.ECHO_TOPIC) {
      await c.publishAsync(process.env.ECHO_TOPIC, payload, { qos: 1 });
      console.log('echoed');
    }
  });
  await c.subscribeAsync(arg, { qos: 1 });
  console.log('subscribed');
}

async function connectOnly() {
  try {
    const c = await connect({ clientId: `conn-${process.pid}` });
    console.log('connack');
    await c.endAsync();
  } catch (e) {
    console.log(e.code !== undefined ? `refused ${e.code}` : `error ${e.message}`);
  }
}

// fanout: one publisher, arg subscribers (QoS 0, 128-byte payloads), the
// publisher at most 256 messages ahead of the slowest subscriber; prints
// {"deliveriesPerSec": ...} for MSGS (env BENCH_MSGS) messages.
async function fanout() {
  const nsubs = Number(arg);
  const msgs = Number(process.env.BENCH_MSGS || 1000);
  const counts = new Array(nsubs).fill(0);
  const subs = [];
  for (let i = 0; i < nsubs; i++) {
    const c = await connect({ clientId: `fan-${process.pid}-${i}` });
    c.on('message', () => { counts[i]++; });
    await c.subscribeAsync('fan/out', { qos: 0 });
    subs.push(c);
  }
  const pub = await connect({ clientId: `fanpub-${process.pid}` });
  const payload = Buffer.alloc(128, 'x');
  const minCount = () => counts.reduce((a, b) => Math.min(a, b), Infinity);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < msgs; i++) {
    pub.publish('fan/out', payload, { qos: 0 });
    while (i + 1 - minCount() > 256) await new Promise((r) => setImmediate(r));
  }
  await bounded((async () => { while (minCount() < msgs) await new Promise((r) => setImmediate(r)); })(), 'every delivery');
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ deliveriesPerSec: (msgs * nsubs) / sec }));
  await Promise.all([...subs, pub].map((c) => c.endAsync()));
}

// latency: one publisher and one subscriber, QoS 1, 128-byte payloads at
// 100 msg/s, arg messages; prints {"p50ms", "p99ms", "maxms"}.
async function latency() {
  const n = Number(arg);
  const lat = [];
  const sub = await connect({ clientId: `latsub-${process.pid}` });
  const pub = await connect({ clientId: `latpub-${process.pid}` });
  let done;
  const all = new Promise((r) => { done = r; });
  sub.on('message', (topic, payload) => {
    lat.push(Number(process.hrtime.bigint() - payload.readBigUInt64BE(0)) / 1e6);
    if (lat.length === n) done();
  });
  await sub.subscribeAsync('lat', { qos: 1 });
  const payload = Buffer.alloc(128, 'x');
  for (let i = 0; i < n; i++) {
    await new Promise((r) => setTimeout(r, 10));
    const p = Buffer.from(payload);
    p.writeBigUInt64BE(process.hrtime.bigint(), 0);
    pub.publish('lat', p, { qos: 1 });
  }
  await bounded(all, 'every message');
  lat.sort((a, b) => a - b);
  const q = (x) => lat[Math.min(lat.length - 1, Math.floor(x * lat.length))];
  console.log(JSON.stringify({ p50ms: q(0.5), p99ms: q(0.99), maxms: lat[lat.length - 1] }));
  await Promise.all([sub.endAsync(), pub.endAsync()]);
}

const modes = { suite, will, sub, connect: connectOnly, fanout, latency };
if (!modes[mode]) fail(`unknown mode ${mode}`);
modes[mode]().then(() => {
  if (mode !== 'sub' && mode !== 'will') process.exit(0);
}, (e) => fail(e.stack || String(e)));
