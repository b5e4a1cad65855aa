#!/bin/sh
# Run the quiot bench matrix on a real testbed: the broker and the
# subscriber on this host, the publisher on a Raspberry Pi reached over ssh,
# the link profile applied with tc netem on the Pi. See docs/testbed.md.
#
#   PI=pi@pizero.local BROKER_IP=192.0.2.10 PI_DEV=wlan0 \
#     scripts/netem/testbed-matrix.sh OUTDIR
#
# Environment (defaults in brackets):
#   PI          ssh destination of the Pi (required)
#   BROKER_IP   this host's address as the Pi sees it (required)
#   PI_DEV      the Pi's interface to shape [wlan0]
#   PI_QUIOT    quiot on the Pi [/usr/local/bin/quiot]
#   PI_NETEM    netem.sh on the Pi [/usr/local/lib/quiot/netem.sh]
#   PI_CA       CA certificate on the Pi [/etc/quiot/ca.pem]
#   QUIOT       quiot on this host [dist/quiot]
#   PROTOS      [h3 mqtt]      MODES [request stream]    (HTTP/3 publish modes)
#   PROFILES    [lan wifi ltem nbiot lossy]
#   PAYLOADS    [16 256 1024]  TUNINGS [default lean]    REPEAT [5]
#   COUNT       messages per run [100]   RATE  messages per second [5]
#
# Output: OUTDIR/RUN/pub.json and sub.json (the roles' --metrics-out) for
# every RUN = proto-mode-tuning-profile-payload-rN, and OUTDIR/runs.txt.
set -eu

OUT=${1:?usage: $0 OUTDIR}
: "${PI:?set PI to the Pi's ssh destination}"
: "${BROKER_IP:?set BROKER_IP to this host's address as the Pi sees it}"
PI_DEV=${PI_DEV:-wlan0}
PI_QUIOT=${PI_QUIOT:-/usr/local/bin/quiot}
PI_NETEM=${PI_NETEM:-/usr/local/lib/quiot/netem.sh}
PI_CA=${PI_CA:-/etc/quiot/ca.pem}
QUIOT=${QUIOT:-dist/quiot}
PROTOS=${PROTOS:-h3 mqtt}
MODES=${MODES:-request stream}
PROFILES=${PROFILES:-lan wifi ltem nbiot lossy}
PAYLOADS=${PAYLOADS:-16 256 1024}
TUNINGS=${TUNINGS:-default lean}
REPEAT=${REPEAT:-5}
COUNT=${COUNT:-100}
RATE=${RATE:-5}

mkdir -p "$OUT"
SUBPID=
cleanup() {
	[ -n "$SUBPID" ] && kill "$SUBPID" 2>/dev/null || true
	ssh "$PI" "sudo sh $PI_NETEM clear $PI_DEV" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

# The clocks must agree for publish -> deliver latency (chrony on both).
ssh "$PI" "chronyc -n tracking" | grep -E "System time|Leap status" || echo "warning: chronyc tracking failed on the Pi" >&2

url() { # proto
	case "$1" in
	h3) echo "https://$BROKER_IP:4433" ;;
	mqtt) echo "mqtt-quic://$BROKER_IP:14567" ;;
	esac
}

for profile in $PROFILES; do
	ssh "$PI" "sudo sh $PI_NETEM apply $profile $PI_DEV $BROKER_IP"
	for proto in $PROTOS; do
		modes=$MODES
		[ "$proto" = mqtt ] && modes=mqtt
		for mode in $modes; do
			for tuning in $TUNINGS; do
				for payload in $PAYLOADS; do
					r=1
					while [ "$r" -le "$REPEAT" ]; do
						run="$proto-$mode-$tuning-$profile-$payload-r$r"
						dir="$OUT/$run"
						mkdir -p "$dir"
						topic="bench/$run"
						# The subscriber runs here, next to the broker,
						# over the unshaped loopback.
						"$QUIOT" sub --broker "$(url "$proto" | sed "s/$BROKER_IP/127.0.0.1/")" --insecure \
							--topic "$topic" --count "$COUNT" --format none --quiet \
							--tuning "$tuning" --metrics-out "$dir/sub.json" &
						SUBPID=$!
						sleep 1 # the subscription is set up before the first publish
						pubmode=""
						[ "$proto" = h3 ] && pubmode="--mode $mode"
						ssh "$PI" "$PI_QUIOT pub --broker $(url "$proto") --ca $PI_CA --topic $topic \
							--payload-size $payload --count $COUNT --rate $RATE $pubmode --tuning $tuning \
							--quiet --metrics-out /tmp/pub.json" || echo "$run: publisher failed" >&2
						scp -q "$PI:/tmp/pub.json" "$dir/pub.json" || true
						# The subscriber exits after COUNT messages; give
						# lost ones the time a poor link needs, then stop it.
						t=0
						while kill -0 "$SUBPID" 2>/dev/null && [ "$t" -lt 30 ]; do sleep 1; t=$((t + 1)); done
						kill "$SUBPID" 2>/dev/null || true
						wait "$SUBPID" 2>/dev/null || true
						SUBPID=
						echo "$run" >>"$OUT/runs.txt"
						echo "$run done"
						r=$((r + 1))
					done
				done
			done
		done
	done
	ssh "$PI" "sudo sh $PI_NETEM clear $PI_DEV"
done
