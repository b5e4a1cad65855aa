#!/usr/bin/env bash
# mqtt-vs-mosquitto.sh: quiot broker and Debian's mosquitto side by side
# under the same MQTT/TCP (or TLS, or WebSocket: PROTO) load from the same
# third-party client (MQTT.js 5 in Node, scripts/mqttload.mjs), one broker
# after the other on loopback (docs/BENCH.md, "quiot beside mosquitto").
#
#   scripts/mqtt-vs-mosquitto.sh [BIN]        # BIN default dist/quiot
#   STEPS="1000 10000" RATE=100 DURATION=30 scripts/mqtt-vs-mosquitto.sh dist/quiot
#   flock /tmp/quiot-heavy.lock scripts/mqtt-vs-mosquitto.sh dist/quiot
#   BASE=/tmp/quiot-old BROKERS="base quiot mosquitto" scripts/mqtt-vs-mosquitto.sh dist/quiot
#
# Per step of N subscribers (10 topic groups, QoS 1) and one publisher at
# RATE msg/s of SIZE bytes for DURATION s, each broker is started fresh and
# measured from /proc/PID: CPU s (utime+stime, from before the first
# connection to the last delivery; "load" = the publishing part only, with
# its user and system time in brackets), VmRSS
# idle, after the connections, at the end, VmHWM (peak), KB per connection
# ((connected - idle) / N), deliveries and latency p50/p99 (publish call ->
# delivery, one clock). The last column of each quiot row is quiot /
# mosquitto of the same step.
#
# quiot runs with its default flags plus the loopback addresses
# (`broker --config "" --dev --listen 127.0.0.1:0 --mqtt-tcp 127.0.0.1:0
# --mqtt-quic 127.0.0.1:0 --metrics-listen 127.0.0.1:0`) and QUIOT_ARGS;
# for N above its default --mqtt-max-clients (1024) the script adds
# --mqtt-max-clients and --mqtt-max-sessions of N+16 and says so.
# Subscribers connect from 127.0.x.y, PER_ADDR (4) per address (SPREAD=0:
# all from 127.0.0.1; quiot then refuses the 257th, as it counts anonymous
# clients per source address).
#
# BASE names a second quiot binary (e.g. one built before a change) run as
# broker "base" with the same flags, for before/after rows from one run.
#
# PROTO=tls runs MQTT over TLS 1.3 instead (quiot --mqtt-tls with its --dev
# certificate; mosquitto with a throwaway self-signed P-256 certificate;
# the client does not verify either).
#
# PROTO=ws runs MQTT over WebSocket (no TLS) instead: quiot with --mqtt-ws,
# the client at ws://127.0.0.1:PORT/mqtt (the path quiot serves it at);
# mosquitto with a "protocol websockets" listener (and an unused plain one:
# 2.0.11 does not start with websockets listeners alone), the client at
# ws://127.0.0.1:PORT (mosquitto serves any path). mosquitto 2.0.11's
# websockets listener ignores the bind address: it listens on every address
# (anonymous) while its step runs.
#
# Environment: PROTO (tcp, tls or ws), STEPS ("1000"), RATE (100), DURATION (30 seconds), SIZE (110),
# PER_ADDR (4), SPREAD (1), QUIOT_ARGS, QUIOT_ENV (e.g. GOGC=100),
# BROKERS ("quiot mosquitto"), MOSQUITTO (/usr/sbin/mosquitto),
# QUIOT_NPM_DIR (MQTT.js prefix, as scripts/deps.sh installs it),
# OUT (a directory to keep the JSON lines and broker logs in).
set -euo pipefail

BIN=${1:-dist/quiot}
STEPS=${STEPS:-1000}
BROKERS=${BROKERS:-quiot mosquitto}
MOSQUITTO=${MOSQUITTO:-/usr/sbin/mosquitto}
QUIOT_ARGS=${QUIOT_ARGS:-}
QUIOT_ENV=${QUIOT_ENV:-}
npm_dir=${QUIOT_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/quiot/npm}
here=$(cd "$(dirname "$0")" && pwd)
export PROTO=${PROTO:-tcp}
case $PROTO in tcp | tls | ws) ;; *) echo "mqtt-vs-mosquitto: PROTO is tcp, tls or ws" >&2; exit 1 ;; esac
TLS=0 WS=0
[ "$PROTO" = tls ] && TLS=1
[ "$PROTO" = ws ] && WS=1
export TLS WS
export RATE=${RATE:-100} DURATION=${DURATION:-30} SIZE=${SIZE:-110} PER_ADDR=${PER_ADDR:-4} SPREAD=${SPREAD:-1}

case " $BROKERS " in *" quiot "*) [ -x "$BIN" ] || { echo "mqtt-vs-mosquitto: no executable $BIN (make quiot)" >&2; exit 1; } ;; esac
case " $BROKERS " in *" base "*) [ -x "${BASE:-}" ] || { echo "mqtt-vs-mosquitto: BROKERS has base: BASE must name a quiot binary" >&2; exit 1; } ;; esac
case " $BROKERS " in *" mosquitto "*) [ -x "$MOSQUITTO" ] || { echo "mqtt-vs-mosquitto: no $MOSQUITTO (apt-get install mosquitto)" >&2; exit 1; } ;; esac
[ -f "$npm_dir/node_modules/mqtt/package.json" ] || { echo "mqtt-vs-mosquitto: no MQTT.js in $npm_dir (scripts/deps.sh)" >&2; exit 1; }

# 10,000 clients need as many descriptors in the broker and in Node.
ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d)
out=${OUT:-$tmp}
mkdir -p "$out"
broker_pid=
cleanup() {
	if [ -n "$broker_pid" ]; then kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_quiot N [BIN]: starts the broker, sets broker_pid, port and ws_path.
start_quiot() {
	local n=$1 bin=${2:-$BIN} extra=$QUIOT_ARGS
	if [ "$n" -gt 1000 ]; then
		extra="--mqtt-max-clients $((n + 16)) --mqtt-max-sessions $((n + 16)) $extra"
	fi
	echo "quiot flags beyond the defaults: ${extra:-none}" >&2
	# shellcheck disable=SC2086
	local l="--mqtt-tcp 127.0.0.1:0" scheme=mqtt
	if [ "$PROTO" = tls ]; then l="--mqtt-tls 127.0.0.1:0" scheme=mqtts; fi
	if [ "$PROTO" = ws ]; then l="--mqtt-ws 127.0.0.1:0" scheme=ws; fi
	ws_path=/mqtt
	# shellcheck disable=SC2086
	env $QUIOT_ENV "$bin" broker --config "" --dev --dev-cert-out "" --listen 127.0.0.1:0 $l \
		--mqtt-quic 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --log-level warn $extra \
		>"$out/quiot-$n.out" 2>"$out/quiot-$n.err" &
	broker_pid=$!
	port=
	for _ in $(seq 100); do
		port=$(grep -o "$scheme://127.0.0.1:[0-9]*" "$out/quiot-$n.out" | head -1 | sed 's/.*://' || true)
		[ -n "$port" ] && return 0
		sleep 0.1
	done
	echo "mqtt-vs-mosquitto: quiot did not start:" >&2
	cat "$out/quiot-$n.err" >&2
	exit 1
}

start_base() { start_quiot "$1" "$BASE"; }

start_mosquitto() {
	local n=$1
	port=$(free_port)
	ws_path=/
	printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\nlog_type error\nlog_type warning\n' "$port" >"$out/mosquitto-$n.conf"
	if [ "$PROTO" = tls ]; then
		# mosquitto started as root reads them as user mosquitto: a
		# throwaway key, readable by all.
		if [ ! -f "$tmp/key.pem" ]; then
			openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
				-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
			chmod 755 "$tmp"
			chmod 644 "$tmp/key.pem" "$tmp/cert.pem"
		fi
		printf 'certfile %s\nkeyfile %s\ntls_version tlsv1.3\n' "$tmp/cert.pem" "$tmp/key.pem" >>"$out/mosquitto-$n.conf"
	fi
	if [ "$PROTO" = ws ]; then
		# Debian's 2.0.11 exits ("Unable to start any listening sockets")
		# when all its listeners are websockets ones: a plain one beside,
		# unused.
		printf 'protocol websockets\nlistener %s 127.0.0.1\n' "$(free_port)" >>"$out/mosquitto-$n.conf"
	fi
	"$MOSQUITTO" -c "$out/mosquitto-$n.conf" >"$out/mosquitto-$n.out" 2>"$out/mosquitto-$n.err" &
	broker_pid=$!
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "mqtt-vs-mosquitto: mosquitto did not start:" >&2
	cat "$out/mosquitto-$n.err" >&2
	exit 1
}

stop_broker() {
	kill "$broker_pid" 2>/dev/null || true
	wait "$broker_pid" 2>/dev/null || true
	broker_pid=
}

row() { # row NAME JSON [REF_JSON]
	node -e '
const [name, j, r] = process.argv.slice(1)
const a = JSON.parse(j), b = r ? JSON.parse(r) : null
const mb = (kb) => (kb / 1024).toFixed(1)
const x = (k) => (b && b[k] ? " (" + (a[k] / b[k]).toFixed(2) + "x)" : "")
console.log(`| ${a.n} | ${name} | ${a.cpu_s}${x("cpu_s")} | ${a.cpu_load_s}${x("cpu_load_s")}${a.user_load_s !== undefined ? ` [user ${a.user_load_s}, sys ${a.sys_load_s}]` : ""} | ${mb(a.rss_idle_kb)} | ${mb(a.rss_connected_kb)} | ${mb(a.rss_end_kb)}${x("rss_end_kb")} | ${mb(a.rss_peak_kb)}${x("rss_peak_kb")} | ${a.kb_per_conn}${x("kb_per_conn")} | ${a.deliveries}/${a.expected} | ${a.p50_ms} / ${a.p99_ms} | ${a.connected}${a.refused ? " (" + a.refused + " refused: " + a.first_error + ")" : ""} |`)
' "$@"
}

echo "host: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r); $(date -u +%FT%TZ)"
for b in $BROKERS; do
	case $b in
	quiot) echo "quiot: $BIN, $("$BIN" version 2>&1 | head -1)" ;;
	base) echo "base: $BASE, $("$BASE" version 2>&1 | head -1)" ;;
	mosquitto) echo "mosquitto: $("$MOSQUITTO" -h 2>&1 | head -1)" ;;
	esac
done
echo "load: subscribers over MQTT/$PROTO in 10 groups, QoS 1; 1 publisher, $RATE msg/s of $SIZE B for $DURATION s; MQTT.js $(node -p "require('$npm_dir/node_modules/mqtt/package.json').version"), Node $(node --version)"
echo
echo "| N | broker | CPU s | CPU s (load) | RSS idle MB | RSS connected MB | RSS end MB | RSS peak MB | KB/conn | deliveries | p50 / p99 ms | connected |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in $STEPS; do
	declare -A res=()
	for b in $BROKERS; do
		"start_$b" "$n"
		sleep 1
		res[$b]=$(MQTTJS_DIR=$npm_dir HOST=127.0.0.1 PORT=$port WS_PATH=$ws_path BROKER_PID=$broker_pid N=$n \
			node "$here/mqttload.mjs" 2>"$out/load-$b-$n.err")
		echo "${res[$b]}" >"$out/$b-$n.json"
		stop_broker
	done
	for b in $BROKERS; do
		if [ "$b" != mosquitto ] && [ -n "${res[mosquitto]:-}" ]; then
			row "$b $QUIOT_ARGS" "${res[$b]}" "${res[mosquitto]}"
		else
			row "$b" "${res[$b]}"
		fi
	done
	unset res
done
