package build

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/testenv"
)

// TestAssetsPresent checks that every listed asset is embedded.
func TestAssetsPresent(t *testing.T) {
	for _, a := range Assets() {
		b, err := Files.ReadFile(a.Src)
		if err != nil {
			t.Errorf("%s: %v", a.Src, err)
			continue
		}
		if len(b) == 0 {
			t.Errorf("%s is empty", a.Src)
		}
	}
}

// TestUnitsVerify runs systemd-analyze verify on every unit (and on an
// instance of each template), with ExecStart pointed at a real executable
// copy so that verify's executable check passes honestly, and requires no
// warnings at all. It also runs systemd-analyze security offline and
// requires a low exposure score.
func TestUnitsVerify(t *testing.T) {
	sa := testenv.RequireTool(t, "systemd-analyze")
	dir := t.TempDir()
	// Stand-in for /usr/bin/quiot: this test binary is an executable file.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "quiot")
	copyFile(t, self, bin, 0o755)
	for _, u := range Units {
		b, err := Files.ReadFile("systemd/" + u)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(BinaryPath+" ")) {
			t.Fatalf("%s does not run %s", u, BinaryPath)
		}
		b = bytes.ReplaceAll(b, []byte(BinaryPath+" "), []byte(bin+" "))
		if err := os.WriteFile(filepath.Join(dir, u), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range Units {
		name := strings.Replace(u, "@.", "@quiot.", 1)
		t.Run(name, func(t *testing.T) {
			for _, required := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure",
				"User=quiot", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
				"PrivateTmp=yes", "CapabilityBoundingSet=\n", "DeviceAllow=/dev/gpiomem rw",
				"SupplementaryGroups=gpio", "WantedBy=multi-user.target"} {
				b, _ := Files.ReadFile("systemd/" + u)
				if !bytes.Contains(b, []byte(required)) {
					t.Errorf("%s lacks %q", u, strings.TrimSpace(required))
				}
			}
			// /proc must stay readable: no ProtectProc=invisible/noaccess, no ProcSubset=pid.
			b, _ := Files.ReadFile("systemd/" + u)
			for _, banned := range []string{"ProtectProc=noaccess", "ProcSubset=pid", "PrivateDevices=yes"} {
				if bytes.Contains(b, []byte(banned)) {
					t.Errorf("%s has %s, which hides what quiot needs", u, banned)
				}
			}
			cmd := exec.Command(sa, "verify", "--man=no", filepath.Join(dir, name))
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", name, err, out)
			}
			// Exposure 0..10 as systemd prints it; threshold is in tenths.
			cmd = exec.Command(sa, "security", "--offline=true", "--threshold=30", "--no-pager", filepath.Join(dir, name))
			cmd.Dir = dir
			out, err = cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security %s: %v\n%s", name, err, out)
			}
			if i := bytes.LastIndex(out, []byte("Overall exposure level")); i >= 0 {
				t.Logf("%s", bytes.TrimSpace(out[i:]))
			}
		})
	}
}

// TestSysctl checks the drop-in raises both UDP buffer limits to 7500000.
func TestSysctl(t *testing.T) {
	b, err := fs.ReadFile(Files, "sysctl.d/60-quiot.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"net.core.rmem_max", "net.core.wmem_max"} {
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if k2, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k2) == k && strings.TrimSpace(v) == "7500000" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s = 7500000 missing", k)
		}
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}
