#!/usr/bin/env bash
# sdcard.sh: put quiot into a Raspberry Pi OS Lite image, without mounting it.
#
#   scripts/sdcard.sh IMAGE [--role broker|pub|sub] [--config F] [--certs DIR]
#                     [--hostname H] [--wifi SSID:PSK] [--wifi-country CC]
#                     [--user NAME:PASSWORD] [--binary F] [--no-ssh]
#
# Writes into the image's ext4 root partition (with debugfs): the ARMv6 binary
# (/usr/bin/quiot, default dist/quiot-linux-armv6 from `make pi`), the systemd
# units (/etc/systemd/system), the configuration (/etc/quiot/quiot.toml,
# default: the documented example), the certificates (--certs DIR: every
# regular file in DIR to /etc/quiot/; *.key mode 0640), the sysctl drop-in for
# UDP buffers, the quiot system user (member of gpio) and the enabled role's
# multi-user.target.wants symlink; optionally the hostname and a Wi-Fi
# connection (NetworkManager on Bookworm and later, wpa_supplicant.conf on the
# boot partition before). Into the FAT boot partition (with mtools): the `ssh`
# file that enables SSH, userconf.txt (--user) and wpa_supplicant.conf.
#
# Roles and units: broker -> quiot-broker.service; pub -> quiot-pub@quiot.service;
# sub -> quiot-sub@quiot.service (the instance "quiot" reads /etc/quiot/quiot.toml).
#
# Safety: the image must look like Raspberry Pi OS (MBR with a FAT boot
# partition 1 holding cmdline.txt or config.txt, and an ext4 root partition 2
# holding /etc/os-release and /etc/rpi-issue or a Raspbian os-release). Space is
# checked first; all writes go to a copy next to IMAGE, which is checked with
# e2fsck and moved over IMAGE only when everything succeeded. IMAGE is never
# half-written. Needs: sfdisk, mtools, debugfs, e2fsck, dumpe2fs (no root
# needed unless IMAGE is root-owned).
set -euo pipefail

prog=sdcard.sh
die() { echo "$prog: $*" >&2; exit 1; }
usage() { sed -n '3,6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---- arguments --------------------------------------------------------------
image="" role=broker config="" certs="" hostname="" wifi="" country="" user="" ssh=1
binary="$repo/dist/quiot-linux-armv6"
need_arg() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --role) need_arg "$@"; role=$2; shift 2 ;;
    --config) need_arg "$@"; config=$2; shift 2 ;;
    --certs) need_arg "$@"; certs=$2; shift 2 ;;
    --hostname) need_arg "$@"; hostname=$2; shift 2 ;;
    --wifi) need_arg "$@"; wifi=$2; shift 2 ;;
    --wifi-country) need_arg "$@"; country=$2; shift 2 ;;
    --user) need_arg "$@"; user=$2; shift 2 ;;
    --binary) need_arg "$@"; binary=$2; shift 2 ;;
    --no-ssh) ssh=0; shift ;;
    -h|--help) usage ;;
    --*) die "unknown option $1 (see --help)" ;;
    *) [[ -z $image ]] || die "more than one IMAGE given: $image and $1"; image=$1; shift ;;
  esac
done
[[ -n $image ]] || usage

case $role in
  broker) unit=quiot-broker.service; unit_file=quiot-broker.service ;;
  pub|sub) unit=quiot-$role@quiot.service; unit_file=quiot-$role@.service ;;
  *) die "--role must be broker, pub or sub, not '$role'" ;;
esac
if [[ -n $hostname ]] && ! [[ $hostname =~ ^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$ ]]; then
  die "--hostname '$hostname' is not a valid host name (letters, digits, inner hyphens, at most 63)"
fi
wifi_ssid="" wifi_psk=""
if [[ -n $wifi ]]; then
  [[ $wifi == *:* ]] || die "--wifi wants SSID:PSK"
  wifi_ssid=${wifi%%:*} wifi_psk=${wifi#*:}
  [[ -n $wifi_ssid && ${#wifi_ssid} -le 32 ]] || die "--wifi: the SSID must be 1 to 32 characters"
  [[ ${#wifi_psk} -ge 8 && ${#wifi_psk} -le 63 ]] || die "--wifi: the WPA passphrase must be 8 to 63 characters"
  [[ $wifi_ssid$wifi_psk != *[\"$'\n']* ]] || die "--wifi: SSID and passphrase must not contain quotes or newlines"
fi
if [[ -n $country ]] && ! [[ $country =~ ^[A-Z]{2}$ ]]; then
  die "--wifi-country wants a two-letter ISO 3166 code such as GB or DE"
fi
if [[ -n $user ]]; then
  [[ $user =~ ^[a-z_][a-z0-9_-]{0,31}:.+ ]] || die "--user wants NAME:PASSWORD (NAME lower case)"
fi
[[ -f $binary ]] || die "binary $binary not found (run 'make pi' or pass --binary)"
# ELF, 32-bit, little endian, e_machine 40 (ARM).
elfhdr=$(od -An -tx1 -N20 "$binary" | tr -d ' \n')
[[ ${elfhdr:0:8} == 7f454c46 && ${elfhdr:8:2} == 01 && ${elfhdr:10:2} == 01 && ${elfhdr:36:4} == 2800 ]] \
  || die "binary $binary is not a 32-bit ARM ELF executable (the Pi Zero needs GOARCH=arm GOARM=6: 'make pi')"
if [[ -n $config ]]; then
  [[ -f $config && -r $config ]] || die "config $config not found"
else
  config="$repo/build/config/quiot.toml"
fi
if [[ -n $certs ]]; then
  [[ -d $certs ]] || die "--certs $certs is not a directory"
fi

for t in sfdisk mcopy mdir mtype debugfs e2fsck dumpe2fs od awk; do
  command -v "$t" >/dev/null 2>&1 || [[ -x /sbin/$t || -x /usr/sbin/$t ]] \
    || die "$t not found (apt-get install fdisk mtools e2fsprogs)"
done
export PATH=$PATH:/sbin:/usr/sbin
export MTOOLS_SKIP_CHECK=1

# ---- the image's layout -----------------------------------------------------
[[ -f $image ]] || die "$image is not a file"
[[ -r $image && -w $image ]] || die "$image is not readable and writable"
notpi="is not a Raspberry Pi OS image"
table=$(sfdisk -d "$image" 2>/dev/null) || die "$image $notpi: no partition table"
grep -q '^label: dos' <<<"$table" || die "$image $notpi: partition table is not MBR (dos)"
# "IMG1 : start= 8192, size= 1048576, type=c, bootable" -> "1 8192 1048576 c"
parts=$(awk -F'[:,]' '/ : start=/ {
  n=$1; gsub(/ /, "", n); sub(/.*[^0-9]/, "", n); s=$2; z=$3; t=$4
  gsub(/[^0-9]/, "", s); gsub(/[^0-9]/, "", z); sub(/.*type= */, "", t); gsub(/ /, "", t)
  print n, s, z, t }' <<<"$table")
read -r _ boot_start boot_size boot_type < <(awk '$1==1' <<<"$parts") || true
read -r _ root_start root_size root_type < <(awk '$1==2' <<<"$parts") || true
[[ -n ${boot_start:-} && -n ${root_start:-} ]] || die "$image $notpi: it needs a FAT boot partition 1 and an ext4 root partition 2"
case ${boot_type,,} in b|c|e|6|ef) ;; *) die "$image $notpi: partition 1 has type $boot_type, not FAT (c)" ;; esac
[[ $root_type == 83 ]] || die "$image $notpi: partition 2 has type $root_type, not Linux (83)"
img_bytes=$(stat -c %s "$image")
(( (root_start + root_size) * 512 <= img_bytes )) || die "$image is truncated: partition 2 ends past the end of the file"
boot_off=$((boot_start * 512))
root_off=$((root_start * 512))

fat() { echo "$1@@$boot_off"; }
ext() { echo "$1?offset=$root_off"; }
mdir -b -i "$(fat "$image")" ::/ >/dev/null 2>&1 || die "$image $notpi: partition 1 is not a FAT file system"
sb=$(dumpe2fs -h "$(ext "$image")" 2>/dev/null) || die "$image $notpi: partition 2 is not an ext4 file system"
grep -q 'Filesystem magic number: *0xEF53' <<<"$sb" || die "$image $notpi: partition 2 is not an ext4 file system"

# rexists IMG PATH: does PATH exist in the root file system?
rexists() { debugfs -R "stat $2" "$(ext "$1")" 2>/dev/null | grep -q '^Inode:'; }
rcat() { debugfs -R "cat $2" "$(ext "$1")" 2>/dev/null; }
bfiles=$(mdir -b -i "$(fat "$image")" ::/ 2>/dev/null | sed 's#^::/##' | tr 'A-Z' 'a-z')
grep -qxE 'cmdline.txt|config.txt' <<<"$bfiles" || die "$image $notpi: the boot partition has no cmdline.txt or config.txt"
rexists "$image" /etc/os-release || die "$image $notpi: the root partition has no /etc/os-release"
osrel=$(rcat "$image" /etc/os-release)
if ! rexists "$image" /etc/rpi-issue && ! grep -qiE '^ID=raspbian|raspberry' <<<"$osrel"; then
  die "$image $notpi: no /etc/rpi-issue and /etc/os-release is not Raspbian"
fi
codename=$(sed -n 's/^VERSION_CODENAME=//p' <<<"$osrel" | tr -d '"')
legacy_net=0
case $codename in stretch|buster|bullseye) legacy_net=1 ;; esac
if [[ -n $wifi && $legacy_net == 0 ]] && ! rexists "$image" /etc/NetworkManager; then
  legacy_net=1
fi

# ---- stage the files --------------------------------------------------------
stage=$(mktemp -d)
tmp=""
cleanup() { rm -rf "$stage"; [[ -z $tmp ]] || rm -f "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# Root files: "LOCAL DEST MODE UID GID" (numeric; GID may be "Q" for quiot's group).
rootlist=$stage/root.list
: >"$rootlist"
addroot() { echo "$1 $2 $3 $4 $5" >>"$rootlist"; }
for f in "$config" "$binary"; do
  [[ $f != *[[:space:]]* ]] || die "path '$f' contains white space, which debugfs cannot take"
done
cp "$binary" "$stage/quiot"
cp "$config" "$stage/quiot.toml"
addroot "$stage/quiot" /usr/bin/quiot 0755 0 0
addroot "$stage/quiot.toml" /etc/quiot/quiot.toml 0640 0 Q
for u in quiot-broker.service quiot-pub@.service quiot-sub@.service; do
  cp "$repo/build/systemd/$u" "$stage/$u"
  addroot "$stage/$u" "/etc/systemd/system/$u" 0644 0 0
done
cp "$repo/build/sysctl.d/60-quiot.conf" "$stage/60-quiot.conf"
addroot "$stage/60-quiot.conf" /etc/sysctl.d/60-quiot.conf 0644 0 0
if [[ -n $certs ]]; then
  n=0
  for f in "$certs"/*; do
    [[ -f $f ]] || continue
    b=$(basename "$f")
    [[ $b =~ ^[A-Za-z0-9._-]+$ ]] || die "certificate file name '$b' has characters other than letters, digits, . _ -"
    [[ $b != quiot.toml ]] || die "--certs holds a quiot.toml; pass it with --config"
    [[ $b != ca-key.pem ]] || die "--certs holds ca-key.pem, the CA's private key: it must not go onto a device (copy ca.pem and the device's NAME.pem and NAME-key.pem into a directory of their own)"
    cp "$f" "$stage/cert-$b"
    case $b in
      *.key|*key.pem) addroot "$stage/cert-$b" "/etc/quiot/$b" 0640 0 Q ;;
      *) addroot "$stage/cert-$b" "/etc/quiot/$b" 0644 0 0 ;;
    esac
    n=$((n + 1))
  done
  ((n > 0)) || die "--certs $certs holds no files"
fi

# inode_meta IMG PATH -> "MODE UID GID" (mode in octal, permission bits)
inode_meta() {
  debugfs -R "stat $2" "$(ext "$1")" 2>/dev/null | awk '
    /^Inode:/ { for (i = 1; i <= NF; i++) if ($i == "Mode:") m = $(i+1) }
    /^User:/  { u = $2; g = $4 }
    END { if (m != "") print m, u, g }'
}

# The quiot system user and group, and membership in gpio.
for f in passwd group; do
  rexists "$image" /etc/$f || die "$image $notpi: no /etc/$f"
  rcat "$image" /etc/$f >"$stage/$f"
done
for f in shadow gshadow; do
  if rexists "$image" /etc/$f; then rcat "$image" /etc/$f >"$stage/$f"; fi
done
quid=$(awk -F: '$1=="quiot" {print $3}' "$stage/passwd")
qgid=$(awk -F: '$1=="quiot" {print $3}' "$stage/group")
if [[ -z $qgid ]]; then
  if [[ -n $quid ]]; then
    qgid=$(awk -F: '$1=="quiot" {print $4}' "$stage/passwd")
  else
    # highest number in 100..999 free as both a uid and a gid
    qgid=$(awk -F: 'FNR==NR {used[$3]=1; next} {used[$3]=1} END {
      for (i = 999; i >= 100; i--) if (!(i in used)) { print i; exit } }' "$stage/passwd" "$stage/group")
    [[ -n $qgid ]] || die "no free system uid/gid in 100..999 in the image"
  fi
  echo "quiot:x:$qgid:" >>"$stage/group"
  [[ ! -f $stage/gshadow ]] || echo "quiot:!::" >>"$stage/gshadow"
fi
if [[ -z $quid ]]; then
  quid=$qgid
  if awk -F: -v u="$quid" '$3==u {found=1} END {exit !found}' "$stage/passwd"; then
    quid=$(awk -F: 'FNR==NR {used[$3]=1; next} END {
      for (i = 999; i >= 100; i--) if (!(i in used)) { print i; exit } }' "$stage/passwd" /dev/null)
  fi
  echo "quiot:x:$quid:$qgid:quiot pub-sub over QUIC:/var/lib/quiot:/usr/sbin/nologin" >>"$stage/passwd"
  [[ ! -f $stage/shadow ]] || echo "quiot:*:$(( $(date +%s) / 86400 )):0:99999:7:::" >>"$stage/shadow"
fi
# gpio: create it if missing, then add quiot to its members.
if ! awk -F: '$1=="gpio" {f=1} END {exit !f}' "$stage/group"; then
  ggid=$(awk -F: 'FNR==NR {used[$3]=1; next} END {
    for (i = 998; i >= 100; i--) if (!(i in used)) { print i; exit } }' "$stage/group" /dev/null)
  echo "gpio:x:$ggid:" >>"$stage/group"
  [[ ! -f $stage/gshadow ]] || echo "gpio:!::" >>"$stage/gshadow"
fi
addmember() { # FILE FIELD: add quiot to the member list (field) of line gpio
  awk -F: -v OFS=: -v fld="$2" '$1=="gpio" {
      n = split($fld, m, ","); has = 0
      for (i = 1; i <= n; i++) if (m[i] == "quiot") has = 1
      if (!has) $fld = ($fld == "" ? "quiot" : $fld ",quiot") }
    { print }' "$1" >"$1.new" && mv "$1.new" "$1"
}
addmember "$stage/group" 4
[[ ! -f $stage/gshadow ]] || addmember "$stage/gshadow" 4
for f in passwd group shadow gshadow; do
  [[ -f $stage/$f ]] || continue
  read -r m u g < <(inode_meta "$image" /etc/$f) || die "cannot stat /etc/$f in the image"
  addroot "$stage/$f" /etc/$f "$m" "$u" "$g"
done

if [[ -n $hostname ]]; then
  echo "$hostname" >"$stage/hostname"
  addroot "$stage/hostname" /etc/hostname 0644 0 0
  if rexists "$image" /etc/hosts; then rcat "$image" /etc/hosts >"$stage/hosts"; else : >"$stage/hosts"; fi
  if grep -q '^127\.0\.1\.1' "$stage/hosts"; then
    sed -i "s/^127\.0\.1\.1.*/127.0.1.1\t$hostname/" "$stage/hosts"
  else
    printf '127.0.1.1\t%s\n' "$hostname" >>"$stage/hosts"
  fi
  addroot "$stage/hosts" /etc/hosts 0644 0 0
fi

bootlist=$stage/boot.list
: >"$bootlist"
if ((ssh)); then
  : >"$stage/ssh"
  echo "$stage/ssh" >>"$bootlist"
fi
if [[ -n $user ]]; then
  command -v openssl >/dev/null || die "--user needs openssl to hash the password"
  uname=${user%%:*} upass=${user#*:}
  printf '%s:%s\n' "$uname" "$(printf '%s' "$upass" | openssl passwd -6 -stdin)" >"$stage/userconf.txt"
  echo "$stage/userconf.txt" >>"$bootlist"
fi
if [[ -n $wifi ]]; then
  if ((legacy_net)); then
    {
      echo "ctrl_interface=DIR=/var/run/wpa_supplicant GROUP=netdev"
      echo "update_config=1"
      [[ -z $country ]] || echo "country=$country"
      printf 'network={\n\tssid="%s"\n\tpsk="%s"\n}\n' "$wifi_ssid" "$wifi_psk"
    } >"$stage/wpa_supplicant.conf"
    echo "$stage/wpa_supplicant.conf" >>"$bootlist"
  else
    uuid=$(cat /proc/sys/kernel/random/uuid)
    cat >"$stage/quiot-wifi.nmconnection" <<EOF
[connection]
id=quiot-wifi
uuid=$uuid
type=wifi
autoconnect=true

[wifi]
mode=infrastructure
ssid=$wifi_ssid

[wifi-security]
key-mgmt=wpa-psk
psk=$wifi_psk

[ipv4]
method=auto

[ipv6]
method=auto
EOF
    addroot "$stage/quiot-wifi.nmconnection" /etc/NetworkManager/system-connections/quiot-wifi.nmconnection 0600 0 0
    if [[ -n $country ]]; then
      # Bookworm takes the regulatory domain from the kernel command line.
      grep -qix 'cmdline.txt' <<<"$bfiles" || die "--wifi-country: no cmdline.txt on the boot partition"
      mtype -i "$(fat "$image")" ::/cmdline.txt | tr -d '\r' | head -n1 >"$stage/cmdline.txt"
      sed -i -E "s/ ?cfg80211\.ieee80211_regdom=[A-Z]+//; s/\$/ cfg80211.ieee80211_regdom=$country/" "$stage/cmdline.txt"
      echo "$stage/cmdline.txt" >>"$bootlist"
    fi
  fi
fi

# ---- space ------------------------------------------------------------------
need_root=0
while read -r src _; do
  need_root=$((need_root + $(stat -c %s "$src") + 4096))
done <"$rootlist"
bsize=$(awk -F: '/^Block size:/ {gsub(/ /, "", $2); print $2}' <<<"$sb")
bfree=$(awk -F: '/^Free blocks:/ {gsub(/ /, "", $2); print $2}' <<<"$sb")
ifree=$(awk -F: '/^Free inodes:/ {gsub(/ /, "", $2); print $2}' <<<"$sb")
root_free=$((bsize * bfree))
# Files being replaced free their space only after the write: count it all.
if ((need_root + 1048576 > root_free)); then
  die "$image: not enough space in the root partition: need $(( (need_root + 1048576) / 1024 )) KiB, $((root_free / 1024)) KiB free (grow the partition first)"
fi
(($(wc -l <"$rootlist") + 8 <= ifree)) || die "$image: no free inodes in the root partition"
need_boot=0
while read -r src; do need_boot=$((need_boot + $(stat -c %s "$src") + 4096)); done <"$bootlist"
boot_free=$(mdir -i "$(fat "$image")" ::/ 2>/dev/null | awk '/bytes free/ {gsub(/[^0-9]/, ""); print}')
if [[ -n $boot_free ]] && ((need_boot > boot_free)); then
  die "$image: not enough space in the boot partition: need $need_boot bytes, $boot_free free"
fi
dir=$(dirname "$image")
host_free=$(df -B1 --output=avail "$dir" | tail -n1 | tr -d ' ')
img_alloc=$(( $(stat -c %b "$image") * $(stat -c %B "$image") ))
((img_alloc + need_root + 1048576 <= host_free)) \
  || die "not enough space in $dir for a working copy of $image ($((img_alloc / 1048576)) MiB needed, $((host_free / 1048576)) MiB free)"

# ---- write a copy -----------------------------------------------------------
tmp=$(mktemp "$dir/.$(basename "$image").sdcard.XXXXXX")
cp --sparse=always "$image" "$tmp"

script=$stage/debugfs.cmds
: >"$script"
declare -A made=()
mkdirs() { # create missing parents of $1
  local d=${1%/*} path="" part
  IFS=/ read -ra parts <<<"${d#/}"
  for part in "${parts[@]}"; do
    path+="/$part"
    [[ -z ${made[$path]:-} ]] || continue
    made[$path]=1
    if ! rexists "$tmp" "$path"; then
      echo "mkdir $path" >>"$script"
      if [[ $path == /etc/quiot ]]; then
        printf 'sif %s mode 040750\nsif %s gid %s\n' "$path" "$path" "$qgid" >>"$script"
      else
        echo "sif $path mode 040755" >>"$script"
      fi
    elif [[ $path == /etc/quiot ]]; then
      printf 'sif %s mode 040750\nsif %s uid 0\nsif %s gid %s\n' "$path" "$path" "$path" "$qgid" >>"$script"
    fi
  done
}
while read -r src dst mode uid gid; do
  [[ $gid != Q ]] || gid=$qgid
  mkdirs "$dst"
  if rexists "$tmp" "$dst"; then echo "rm $dst" >>"$script"; fi
  printf 'write %s %s\nsif %s mode 010%s\nsif %s uid %s\nsif %s gid %s\n' \
    "$src" "$dst" "$dst" "${mode: -4}" "$dst" "$uid" "$dst" "$gid" >>"$script"
done <"$rootlist"
# Enable exactly this role: drop quiot links left by an earlier run.
wants=/etc/systemd/system/multi-user.target.wants
mkdirs "$wants/x"
if rexists "$tmp" "$wants"; then
  while read -r name; do
    echo "rm $wants/$name" >>"$script"
  done < <(debugfs -R "ls -p $wants" "$(ext "$tmp")" 2>/dev/null | awk -F/ '$6 ~ /^quiot-/ {print $6}')
fi
echo "symlink $wants/$unit /etc/systemd/system/$unit_file" >>"$script"

out=$(debugfs -w -f "$script" "$(ext "$tmp")" 2>&1 >/dev/null) || die "debugfs failed: $out"
# debugfs exits 0 even when a command fails: any message but the banner is an error.
errs=$(grep -v '^debugfs [0-9]' <<<"$out" || true)
[[ -z $errs ]] || die "debugfs reported errors, $image left unchanged:
$errs"
fsck_out=$(e2fsck -fn "$(ext "$tmp")" 2>&1) || die "e2fsck found problems after writing, $image left unchanged:
$fsck_out"
while read -r src; do
  mcopy -o -i "$(fat "$tmp")" "$src" "::/$(basename "$src")" || die "mcopy $(basename "$src") to the boot partition failed"
done <"$bootlist"
# Check what was written before replacing the image.
while read -r _ dst _; do
  rexists "$tmp" "$dst" || die "$dst missing after writing, $image left unchanged"
done <"$rootlist"
rexists "$tmp" "$wants/$unit" || die "$wants/$unit missing after writing, $image left unchanged"

mv -f "$tmp" "$image"
tmp=""
echo "$prog: $image: quiot $role ($unit) enabled; $(wc -l <"$rootlist") files in the root partition, $(wc -l <"$bootlist") on the boot partition"
[[ $ssh == 0 ]] || echo "$prog: ssh enabled$([[ -n $user ]] && echo ", user ${user%%:*}")"
[[ -z $hostname ]] || echo "$prog: hostname $hostname"
[[ -z $wifi ]] || echo "$prog: Wi-Fi $wifi_ssid ($([[ $legacy_net == 1 ]] && echo wpa_supplicant.conf || echo NetworkManager))"
