#!/usr/bin/env bash
# deps.sh installs what quiot's build and tests need: Debian packages (when run
# as root) and the Go tools (staticcheck). Without root it lists what is missing.
set -euo pipefail

# command -> Debian package that provides it
declare -A need=(
  [qemu-arm-static]=qemu-user-static
  [ovs-vsctl]=openvswitch-switch
  [ethtool]=ethtool
  [ip]=iproute2
  [nft]=nftables
  [conntrack]=conntrack
  [sysctl]=procps
  [mcopy]=mtools
  [mkfs.vfat]=dosfstools
  [sfdisk]=fdisk
  [debugfs]=e2fsprogs
  [mkfs.ext4]=e2fsprogs
  [ping]=iputils-ping
  [socat]=socat
  [mosquitto]=mosquitto
  [mosquitto_pub]=mosquitto-clients
  [gtlsclient]=ngtcp2-client
  [tshark]=tshark
  [tcpdump]=tcpdump
  [systemd-analyze]=systemd
  [dpkg-deb]=dpkg
  [chromium]=chromium
  [node]=nodejs
  [npm]=npm
)

missing=()
for cmd in "${!need[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$cmd && ! -x /sbin/$cmd ]]; then
    missing+=("${need[$cmd]}")
  fi
done
# Python modules the interop tests drive (real third-party MQTT clients), with
# the interpreter those tests run: Debian's, whatever python3 PATH finds first.
if ! /usr/bin/python3 -c 'import paho.mqtt.client' >/dev/null 2>&1; then
  missing+=(python3-paho-mqtt)
fi
# de-duplicate
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer no.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "deps: missing Debian packages: ${missing[*]}" >&2
    echo "deps: run 'sudo scripts/deps.sh' (or apt-get install them); tests that need them will skip and say why" >&2
  fi
fi

# MQTT.js (npm "mqtt"), pinned, for the MQTT over WebSocket tests
# (broker/mqttquic/ws_test.go), in the cache folder they look in:
# $QUIOT_NPM_DIR, else ${XDG_CACHE_HOME:-~/.cache}/quiot/npm.
mqttjs_version=5.16.0
npm_dir=${QUIOT_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/quiot/npm}
if command -v npm >/dev/null 2>&1; then
  if [[ $(node -p "require(process.argv[1]).version" "$npm_dir/node_modules/mqtt/package.json" 2>/dev/null) != "$mqttjs_version" ]]; then
    echo "deps: installing MQTT.js $mqttjs_version in $npm_dir"
    mkdir -p "$npm_dir"
    npm install --prefix "$npm_dir" --no-audit --no-fund --no-save --silent "mqtt@$mqttjs_version"
  fi
else
  echo "deps: npm is missing: MQTT.js is not installed; the MQTT over WebSocket tests will skip and say why" >&2
fi

# Go tools, pinned.
gobin=$(go env GOPATH)/bin
if [[ ! -x $gobin/staticcheck ]]; then
  echo "deps: installing staticcheck"
  go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
go mod download
