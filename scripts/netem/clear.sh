#!/bin/sh
# Remove the tc netem shaping that apply.sh set up on DEV (as root).
#   scripts/netem/clear.sh DEV
set -eu
[ $# -ge 1 ] || { echo "usage: $0 DEV" >&2; exit 2; }
exec sh "$(dirname "$0")/netem.sh" clear "$1"
