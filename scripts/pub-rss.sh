#!/usr/bin/env bash
# pub-rss.sh: resident memory of `quiot pub` publishing 1 message per second
# (issue 12 item 4). Starts `quiot broker --dev` on loopback (HTTP/3 and MQTT
# over QUIC), then for each protocol in PROTOS runs RUNS publishers of 1
# msg/s for DURATION seconds each and samples the publisher's
# /proc/PID/status once a second from its first second on. Prints per run
# the median and the maximum VmRSS over the samples, VmHWM (the peak the
# kernel saw, start-up included) and the last sample's RssAnon and RssFile
# (the binary's own pages are most of RssFile), in kB.
#
#   scripts/pub-rss.sh [BIN]                    # BIN default dist/quiot
#   flock /tmp/quiot-heavy.lock scripts/pub-rss.sh dist/quiot
#   QEMU="qemu-arm-static -cpu arm1176" scripts/pub-rss.sh dist/quiot-linux-armv6
#
# Under qemu-user /proc/PID/status is the emulator's (its own code, heap
# and translation cache, about 35 MB more; /proc/self inside the guest is
# faked). With QEMU set the script samples instead the guest's share: the
# Rss of every mapping below 4 GiB in /proc/PID/smaps (the ARM binary's
# pages and the guest's anonymous memory; qemu's own mappings lie above),
# an estimate of what the publisher holds on a Pi with the same page
# fault-around; VmHWM and RssAnon/RssFile then stay the emulator's.
#
# PROTOS=idle measures an idle broker instead: BIN runs `broker --dev` on
# loopback (HTTP/3, MQTT over QUIC; default limits) with no client, sampled
# the same way from its first second on.
#
# Environment: PROTOS ("h3 mqtt"; or idle), RUNS (1), DURATION (60 seconds), EXTRA
# (more pub flags, e.g. "--mode stream"), PUBENV (environment for the
# publisher, e.g. GOGC=50), QEMU (emulator command for BIN), HOSTBIN (the
# native quiot that runs the broker, default BIN or dist/quiot with QEMU).
set -euo pipefail

BIN=${1:-dist/quiot}
PROTOS=${PROTOS:-h3 mqtt}
RUNS=${RUNS:-1}
DURATION=${DURATION:-60}
EXTRA=${EXTRA:-}
PUBENV=${PUBENV:-}
QEMU=${QEMU:-}
[ -x "$BIN" ] || { echo "pub-rss: no executable $BIN (make build or make pi)" >&2; exit 1; }
if [ -n "$QEMU" ]; then HOSTBIN=${HOSTBIN:-dist/quiot}; else HOSTBIN=${HOSTBIN:-$BIN}; fi
[ -x "$HOSTBIN" ] || { echo "pub-rss: no native quiot $HOSTBIN for the broker (make build)" >&2; exit 1; }

tmp=$(mktemp -d)
broker_pid=
pub_pid=
cleanup() {
	[ -n "$pub_pid" ] && kill "$pub_pid" 2>/dev/null || true
	[ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# The broker runs natively (its memory is not measured).
"$HOSTBIN" broker --config "" --dev --listen 127.0.0.1:0 --mqtt-quic 127.0.0.1:0 --metrics-listen "" --log-level warn >"$tmp/broker.out" 2>"$tmp/broker.err" &
broker_pid=$!
h3= mq=
for _ in $(seq 100); do
	h3=$(grep -o 'https://127.0.0.1:[0-9]*' "$tmp/broker.out" | head -1 || true)
	mq=$(grep -o 'mqtt-quic://127.0.0.1:[0-9]*' "$tmp/broker.out" | head -1 || true)
	[ -n "$h3" ] && [ -n "$mq" ] && break
	sleep 0.1
done
[ -n "$h3" ] && [ -n "$mq" ] || { echo "pub-rss: broker did not start:" >&2; cat "$tmp/broker.err" >&2; exit 1; }

field() { awk -v k="$1:" '$1==k{print $2}' "$2"; }
# guest: the Rss of the mappings below 4 GiB (a qemu-user guest's share).
guest() { awk '/^[0-9a-f]+-[0-9a-f]+ /{split($1,a,"-"); low=(length(a[1])<=8)} /^Rss:/{if(low)s+=$2} END{print s+0}' "$1"; }
med() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

what=VmRSS
[ -n "$QEMU" ] && what=guest
printf '%-5s %-4s %8s %8s %10s %10s %10s  (kB; %s sampled each second for %s s)\n' proto run median max VmHWM RssAnon RssFile "$what" "$DURATION"
for proto in $PROTOS; do
	case $proto in
	h3) url=$h3 ;;
	mqtt) url=$mq ;;
	idle) url= ;;
	*) echo "pub-rss: unknown protocol $proto (h3, mqtt, idle)" >&2; exit 1 ;;
	esac
	for r in $(seq "$RUNS"); do
		if [ "$proto" = idle ]; then
			rm -rf "$tmp/idle-data"
			# shellcheck disable=SC2086
			env $PUBENV $QEMU "$BIN" broker --config "" --dev --data-dir "$tmp/idle-data" --listen 127.0.0.1:0 --mqtt-quic 127.0.0.1:0 \
				--metrics-listen "" --log-level warn $EXTRA >/dev/null 2>"$tmp/pub.err" &
		else
			# shellcheck disable=SC2086
			env $PUBENV $QEMU "$BIN" pub --config "" --broker "$url" --topic a/b --payload x --rate 1 --count $((DURATION + 30)) \
				--insecure --log-level warn $EXTRA >/dev/null 2>"$tmp/pub.err" &
		fi
		pub_pid=$!
		: >"$tmp/samples"
		for _ in $(seq "$DURATION"); do
			sleep 1
			if [ -n "$QEMU" ]; then
				cp "/proc/$pub_pid/smaps" "$tmp/smaps" 2>/dev/null || break
				guest "$tmp/smaps" >>"$tmp/samples"
			else
				cp "/proc/$pub_pid/status" "$tmp/status" 2>/dev/null || break
				field VmRSS "$tmp/status" >>"$tmp/samples"
			fi
		done
		cp "/proc/$pub_pid/status" "$tmp/status" 2>/dev/null || { echo "pub-rss: $proto process exited early:" >&2; cat "$tmp/pub.err" >&2; exit 1; }
		kill "$pub_pid" 2>/dev/null; wait "$pub_pid" 2>/dev/null || true
		pub_pid=
		[ "$(wc -l <"$tmp/samples")" -eq "$DURATION" ] || { echo "pub-rss: $proto process exited early:" >&2; cat "$tmp/pub.err" >&2; exit 1; }
		printf '%-5s %-4s %8s %8s %10s %10s %10s\n' "$proto" "$r" "$(med <"$tmp/samples")" "$(sort -n "$tmp/samples" | tail -1)" \
			"$(field VmHWM "$tmp/status")" "$(field RssAnon "$tmp/status")" "$(field RssFile "$tmp/status")"
	done
done
