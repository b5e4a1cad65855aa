#!/usr/bin/env bash
# pub-rss.sh: resident memory of `quiot pub` publishing 1 message per second
# (issue 12 item 4). Starts `quiot broker --dev` on loopback, then RUNS times
# a publisher of 30 messages at 1 msg/s, and reads the publisher's
# /proc/PID/status after WAIT seconds: VmRSS, VmHWM, RssAnon and RssFile (the
# binary's own pages are most of RssFile). Prints each run and the medians.
#
#   scripts/pub-rss.sh [BIN]                    # BIN default dist/quiot
#   QEMU="qemu-arm-static -cpu arm1176" scripts/pub-rss.sh dist/quiot-linux-armv6
#
# Under qemu-user the figures are those of the qemu process: the emulator
# (about 4-5 MB of its own), its translation cache and the guest's mapped
# pages together, not what the binary holds on a Pi (/proc/self inside the
# guest is faked).
#
# Environment: RUNS (3), WAIT (20 seconds), EXTRA (more pub flags, e.g.
# "--mode stream"), PUBENV (environment for the publisher, e.g. GOGC=50).
set -euo pipefail

BIN=${1:-dist/quiot}
RUNS=${RUNS:-3}
WAIT=${WAIT:-20}
EXTRA=${EXTRA:-}
PUBENV=${PUBENV:-}
QEMU=${QEMU:-}
[ -x "$BIN" ] || { echo "pub-rss: no executable $BIN (make build or make pi)" >&2; exit 1; }

tmp=$(mktemp -d)
broker_pid=
cleanup() {
	[ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# The broker runs natively (its memory is not measured).
HOSTBIN=${HOSTBIN:-$BIN}
if [ -n "$QEMU" ]; then HOSTBIN=${HOSTBIN_NATIVE:-dist/quiot}; fi
"$HOSTBIN" broker --config "" --dev --listen 127.0.0.1:0 --mqtt-quic "" --metrics-listen "" --log-level warn >"$tmp/broker.out" 2>"$tmp/broker.err" &
broker_pid=$!
for _ in $(seq 100); do
	url=$(grep -o 'https://127.0.0.1:[0-9]*' "$tmp/broker.out" | head -1 || true)
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "$url" ] || { echo "pub-rss: broker did not start:" >&2; cat "$tmp/broker.err" >&2; exit 1; }

field() { awk -v k="$1:" '$1==k{print $2}' "$2"; }
printf '%-4s %10s %10s %10s %10s\n' run VmRSS_kB VmHWM_kB RssAnon_kB RssFile_kB
for r in $(seq "$RUNS"); do
	# shellcheck disable=SC2086
	env $PUBENV $QEMU "$BIN" pub --config "" --broker "$url" --topic a/b --payload x --rate 1 --count 30 --insecure --log-level warn $EXTRA >/dev/null 2>"$tmp/pub.err" &
	pid=$!
	sleep "$WAIT"
	cp "/proc/$pid/status" "$tmp/status.$r" || { echo "pub-rss: publisher exited early:" >&2; cat "$tmp/pub.err" >&2; exit 1; }
	kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
	printf '%-4s %10s %10s %10s %10s\n' "$r" "$(field VmRSS "$tmp/status.$r")" "$(field VmHWM "$tmp/status.$r")" \
		"$(field RssAnon "$tmp/status.$r")" "$(field RssFile "$tmp/status.$r")"
done
med() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
printf '%-4s' median
for k in VmRSS VmHWM RssAnon RssFile; do
	printf ' %10s' "$(for r in $(seq "$RUNS"); do field "$k" "$tmp/status.$r"; done | med)"
done
printf '\n'
