#!/bin/sh
# Apply a quiot link profile with tc netem on a testbed device (as root).
#   scripts/netem/apply.sh PROFILE DEV [BROKER_IP]
# Profiles: scripts/netem/netem.sh list. See docs/testbed.md.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 PROFILE DEV [BROKER_IP]" >&2; exit 2; }
exec sh "$(dirname "$0")/netem.sh" apply "$@"
