// Package build holds quiot's deployment assets — systemd units, the sysctl
// drop-in, the sysusers.d entry and the example configuration — embedded so
// that the .deb builder (build/deb) and tests use exactly the files in this
// directory. scripts/sdcard.sh reads the same files from disk.
package build

import "embed"

// Files holds the assets under their directory names: systemd/*.service,
// sysctl.d/60-quiot.conf, sysusers.d/quiot.conf and config/quiot.toml.
//
//go:embed systemd/*.service sysctl.d/*.conf sysusers.d/*.conf config/quiot.toml
var Files embed.FS

// Asset is one deployment file and where it is installed on the device.
type Asset struct {
	Src  string // path inside Files
	Dst  string // absolute install path
	Mode uint32 // file mode
	// Conffile marks files the administrator edits (kept on upgrade).
	Conffile bool
}

// Units are the systemd unit file names, in Files under systemd/.
var Units = []string{"quiot-broker.service", "quiot-pub@.service", "quiot-sub@.service"}

// Assets lists every file besides the binary, with its install path. The
// binary itself goes to BinaryPath.
func Assets() []Asset {
	a := make([]Asset, 0, len(Units)+3)
	for _, u := range Units {
		a = append(a, Asset{Src: "systemd/" + u, Dst: "/usr/lib/systemd/system/" + u, Mode: 0o644})
	}
	return append(a,
		Asset{Src: "sysctl.d/60-quiot.conf", Dst: "/usr/lib/sysctl.d/60-quiot.conf", Mode: 0o644},
		Asset{Src: "sysusers.d/quiot.conf", Dst: "/usr/lib/sysusers.d/quiot.conf", Mode: 0o644},
		Asset{Src: "config/quiot.toml", Dst: "/etc/quiot/quiot.toml", Mode: 0o644, Conffile: true},
	)
}

// BinaryPath is where the quiot binary is installed; the units run it from there.
const BinaryPath = "/usr/bin/quiot"
