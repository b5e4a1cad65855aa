// mqttload.mjs: the load of scripts/mqtt-vs-mosquitto.sh (docs/BENCH.md,
// "quiot beside mosquitto"). One Node process, MQTT.js 5 over MQTT/TCP (or
// TLS, or WebSocket):
// N subscribers in G topic groups (bench/g0 .. bench/g<G-1>, QoS 1), then
// one publisher sending R messages/s of SIZE bytes for T s at QoS 1, each to
// the next group in turn; every message carries its send time, so latency is
// measured on one clock (performance.now() of this process).
//
// The broker's own cost is read from /proc/BROKER_PID: CPU (utime+stime;
// user_load_s and sys_load_s split the publishing part's)
// and VmRSS at the phases below, VmHWM (peak) at the end. It prints one JSON
// line on stdout.
//
// Environment: MQTTJS_DIR (npm prefix holding node_modules/mqtt), HOST,
// PORT, BROKER_PID, N, GROUPS, RATE, DURATION (seconds), SIZE, SPREAD (1: subscriber i
// connects from source address 127.0.x.y, 4 subscribers an address, as
// devices behind distinct addresses do; 0: all from 127.0.0.1), TLS (1: MQTT
// over TLS 1.3, the server's certificate not verified), WS (1: MQTT over
// WebSocket, ws://HOST:PORT + WS_PATH, e.g. /mqtt for quiot), DRAIN_MS.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import tls from 'node:tls'
import { performance } from 'node:perf_hooks'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'

const require = createRequire(import.meta.url)
const mqtt = require(`${process.env.MQTTJS_DIR}/node_modules/mqtt`)

const env = (k, d) => (process.env[k] === undefined || process.env[k] === '' ? d : process.env[k])
const host = env('HOST', '127.0.0.1')
const port = Number(env('PORT', '1883'))
const pid = Number(env('BROKER_PID', '0'))
const n = Number(env('N', '1000'))
const groups = Number(env('GROUPS', '10'))
const rate = Number(env('RATE', '100'))
const seconds = Number(env('DURATION', '30'))
const size = Number(env('SIZE', '110'))
const spread = env('SPREAD', '1') === '1'
const useTLS = env('TLS', '0') === '1'
const useWS = env('WS', '0') === '1'
const wsPath = env('WS_PATH', '/')
const perAddr = Number(env('PER_ADDR', '4'))
const settleMs = Number(env('SETTLE_MS', '2000'))
const drainMs = Number(env('DRAIN_MS', '15000'))
const connectWindow = Number(env('CONNECT_WINDOW', '100'))
const workers = Number(env('WORKERS', '2'))
const clkTck = 100 // USER_HZ on Linux

function proc () {
  if (!pid) return { cpu: 0, user: 0, sys: 0, rss: 0, hwm: 0 }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const user = Number(f[11]) / clkTck // utime (field 14)
  const sys = Number(f[12]) / clkTck // stime (field 15)
  const cpu = user + sys
  const st = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (k) => Number((st.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm')) || [0, 0])[1])
  return { cpu, user, sys, rss: kb('VmRSS'), hwm: kb('VmHWM') }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function srcAddr (i) {
  if (!spread) return undefined
  const a = Math.floor(i / perAddr) + 2 // 127.0.0.2 onwards
  return `127.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}`
}

function connect (id, local) {
  return new Promise((resolve, reject) => {
    const dial = useTLS
      ? () => tls.connect({ host, port, localAddress: local, servername: 'localhost', rejectUnauthorized: false, minVersion: 'TLSv1.3' })
      : () => net.createConnection({ host, port, localAddress: local })
    const opts = {
      protocolVersion: 4, clientId: id, clean: true, reconnectPeriod: 0, keepalive: 60, connectTimeout: 60000
    }
    const c = useWS
      ? mqtt.connect(`ws://${host}:${port}${wsPath}`, { ...opts, wsOptions: { localAddress: local } })
      : new mqtt.MqttClient(dial, opts)
    c.once('connect', () => resolve(c))
    c.once('error', (e) => { c.end(true); reject(new Error(`${id}: ${e.message}`)) })
    c.once('close', () => reject(new Error(`${id}: closed before CONNACK`)))
  })
}

const now = () => performance.timeOrigin + performance.now() // one clock across threads

if (!isMainThread) {
  // A worker: subscribers workerData.from .. workerData.to - 1.
  const lat = []
  let deliveries = 0
  let refused = 0
  let firstError = ''
  const subs = []
  let next = workerData.from
  const worker = async () => {
    while (next < workerData.to) {
      const i = next++
      try {
        const c = await connect(`sub-${i}`, srcAddr(i))
        c.on('message', (_t, payload) => {
          lat.push(now() - Number(payload.toString('latin1', 0, 20)))
          deliveries++
        })
        await c.subscribeAsync(`bench/g${i % groups}`, { qos: 1 })
        subs.push(i)
      } catch (e) {
        refused++
        if (!firstError) firstError = e.message
      }
    }
  }
  await Promise.all(Array.from({ length: connectWindow }, worker))
  const perGroup = new Array(groups).fill(0)
  for (const i of subs) perGroup[i % groups]++
  parentPort.postMessage({ ready: true, connected: subs.length, refused, firstError, perGroup })
  const tick = setInterval(() => parentPort.postMessage({ deliveries }), 100)
  parentPort.on('message', () => {
    clearInterval(tick)
    const a = Float64Array.from(lat)
    parentPort.postMessage({ deliveries, lat: a }, [a.buffer])
    setTimeout(() => process.exit(0), 100)
  })
} else {
  const p0 = proc()
  const tStart = performance.now()
  const ws = []
  for (let w = 0; w < workers; w++) {
    ws.push(new Worker(new URL(import.meta.url), { workerData: { from: Math.floor(w * n / workers), to: Math.floor((w + 1) * n / workers) } }))
  }
  const counts = new Array(workers).fill(0)
  const ready = await Promise.all(ws.map((w, k) => new Promise((resolve) => {
    w.on('message', (m) => { if (m.ready) resolve(m); else if (m.deliveries !== undefined && !m.lat) counts[k] = m.deliveries })
  })))
  const connectS = (performance.now() - tStart) / 1000
  const connected = ready.reduce((s, r) => s + r.connected, 0)
  const refused = ready.reduce((s, r) => s + r.refused, 0)
  const firstError = (ready.find((r) => r.firstError) || {}).firstError || ''
  const perGroup = new Array(groups).fill(0)
  for (const r of ready) r.perGroup.forEach((v, g) => { perGroup[g] += v })
  await sleep(settleMs) // let the broker settle after the connections
  const pConn = proc()

  const pub = await connect('pub', undefined)
  const pad = 'x'.repeat(size)
  const total = Math.round(rate * seconds)
  let expected = 0
  const tPub = performance.now()
  const interval = 1000 / rate
  for (let k = 0; k < total; k++) {
    const due = tPub + k * interval
    const wait = due - performance.now()
    if (wait > 1) await sleep(wait)
    const g = k % groups
    expected += perGroup[g]
    const stamp = now().toFixed(3).padStart(20, '0')
    pub.publish(`bench/g${g}`, (stamp + pad).slice(0, size), { qos: 1 })
  }
  const pubS = (performance.now() - tPub) / 1000
  const tDrain = performance.now()
  const sum = () => counts.reduce((s, v) => s + v, 0)
  while (sum() < expected && performance.now() - tDrain < drainMs) await sleep(50)
  const pEnd = proc()
  const finals = await Promise.all(ws.map((w) => new Promise((resolve) => {
    w.on('message', (m) => { if (m.lat) resolve(m) })
    w.postMessage('finish')
  })))
  const deliveries = finals.reduce((s, f) => s + f.deliveries, 0)
  const lat = new Float64Array(finals.reduce((s, f) => s + f.lat.length, 0))
  let off = 0
  for (const f of finals) { lat.set(f.lat, off); off += f.lat.length }
  lat.sort()
  const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : NaN)
  const out = {
    n, connected, refused, first_error: firstError, groups, rate, seconds, size,
    sent: total, expected, deliveries,
    connect_s: +connectS.toFixed(2), publish_s: +pubS.toFixed(2),
    p50_ms: +q(0.5).toFixed(2), p99_ms: +q(0.99).toFixed(2), max_ms: +q(1).toFixed(2),
    cpu_s: +(pEnd.cpu - p0.cpu).toFixed(2),
    cpu_load_s: +(pEnd.cpu - pConn.cpu).toFixed(2),
    user_load_s: +(pEnd.user - pConn.user).toFixed(2),
    sys_load_s: +(pEnd.sys - pConn.sys).toFixed(2),
    rss_idle_kb: p0.rss, rss_connected_kb: pConn.rss, rss_end_kb: pEnd.rss, rss_peak_kb: pEnd.hwm,
    kb_per_conn: connected ? +((pConn.rss - p0.rss) / connected).toFixed(2) : NaN
  }
  console.log(JSON.stringify(out))
  pub.end(true)
  process.exit(0)
}
