// Package scripts tests the shell scripts in this directory.
package scripts

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/testenv"
)

const (
	bootStart = 2048 // sectors
	bootSize  = 131072
	rootStart = bootStart + bootSize
)

// imageSpec describes a synthetic Raspberry Pi OS Lite image.
type imageSpec struct {
	rootMiB   int               // size of the ext4 root partition
	osRelease string            // /etc/os-release
	noRPi     bool              // leave out /etc/rpi-issue
	bootFiles []string          // files on the FAT partition
	table     string            // sfdisk script; default two partitions
	noFAT     bool              // leave partition 1 unformatted
	extra     map[string]string // more root files
}

func tools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"sfdisk", "mkfs.vfat", "mkfs.ext4", "mcopy", "mdir", "mtype", "debugfs", "e2fsck", "dumpe2fs", "bash"} {
		testenv.RequireTool(t, tool)
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/sbin:/usr/sbin", "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

const bookworm = "PRETTY_NAME=\"Raspbian GNU/Linux 12 (bookworm)\"\nNAME=\"Raspbian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=raspbian\nID_LIKE=debian\n"

// makeImage builds the image with sfdisk, mkfs.vfat, mkfs.ext4 -d and mtools
// (the recipe of ENVIRONMENT.md), without loop devices.
func makeImage(t *testing.T, s imageSpec) string {
	t.Helper()
	dir := t.TempDir()
	if s.rootMiB == 0 {
		s.rootMiB = 64 // the real ARMv6 binary is ~20 MB, and a rerun replaces it
	}
	if s.osRelease == "" {
		s.osRelease = bookworm
	}
	if s.bootFiles == nil {
		s.bootFiles = []string{"cmdline.txt", "config.txt"}
	}
	root := filepath.Join(dir, "rootfs")
	files := map[string]string{
		"etc/os-release": s.osRelease,
		"etc/passwd":     "root:x:0:0:root:/root:/bin/bash\nsystemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin\npi:x:1000:1000:,,,:/home/pi:/bin/bash\n",
		"etc/group":      "root:x:0:\nshadow:x:42:\ngpio:x:997:pi\nsystemd-network:x:998:\npi:x:1000:\n",
		"etc/shadow":     "root:*:19000:0:99999:7:::\npi:!:19000:0:99999:7:::\n",
		"etc/gshadow":    "root:*::\nshadow:*::\ngpio:!::pi\npi:!::\n",
		"etc/hosts":      "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n\n127.0.1.1\traspberrypi\n",
		"etc/hostname":   "raspberrypi\n",
	}
	if !s.noRPi {
		files["etc/rpi-issue"] = "Raspberry Pi reference 2024-11-19\n"
	}
	for k, v := range s.extra {
		files[k] = v
	}
	for _, d := range []string{"usr/bin", "etc/systemd/system/multi-user.target.wants", "etc/sysctl.d", "etc/NetworkManager/system-connections"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// An unrelated enabled service, which a run must leave alone.
	if err := os.Symlink("/lib/systemd/system/ssh.service", filepath.Join(root, "etc/systemd/system/multi-user.target.wants/ssh.service")); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.Contains(name, "shadow") {
			mode = 0o640
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(name, "shadow") && os.Getuid() == 0 {
			if err := os.Chown(p, 0, 42); err != nil {
				t.Fatal(err)
			}
		}
	}
	img := filepath.Join(dir, "sd.img")
	rootSectors := s.rootMiB * 2048
	total := int64(rootStart+rootSectors) * 512
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, total); err != nil {
		t.Fatal(err)
	}
	table := s.table
	if table == "" {
		table = fmt.Sprintf("label: dos\nunit: sectors\nstart=%d, size=%d, type=c, bootable\nstart=%d, type=83\n", bootStart, bootSize, rootStart)
	}
	cmd := exec.Command("sfdisk", "-q", "--no-reread", "--no-tell-kernel", img)
	cmd.Stdin = strings.NewReader(table)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	if !s.noFAT {
		sh(t, "mkfs.vfat", "--offset", strconv.Itoa(bootStart), "-s", "1", "-F", "32", img, strconv.Itoa(bootSize/2))
		for _, f := range s.bootFiles {
			p := filepath.Join(dir, f)
			if err := os.WriteFile(p, []byte("console=serial0,115200 root=PARTUUID=1234-02 rootfstype=ext4 rootwait\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			sh(t, "mcopy", "-i", fmt.Sprintf("%s@@%d", img, bootStart*512), p, "::/"+f)
		}
	}
	sh(t, "mkfs.ext4", "-q", "-F", "-E", fmt.Sprintf("offset=%d", rootStart*512), "-d", root, img, fmt.Sprintf("%dk", rootSectors/2))
	return img
}

func extPath(img string) string { return fmt.Sprintf("%s?offset=%d", img, rootStart*512) }
func fatPath(img string) string { return fmt.Sprintf("%s@@%d", img, bootStart*512) }

// inode is what debugfs stat says about a path.
type inode struct {
	typ      string
	mode     uint32
	uid, gid int
	linkDest string
	exists   bool
}

var (
	reType = regexp.MustCompile(`Type: (\w+)\s+Mode:\s+(\d+)`)
	reUser = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+)`)
	reLink = regexp.MustCompile(`Fast link dest: "(.*)"`)
)

func stat(t *testing.T, img, path string) inode {
	t.Helper()
	out, _ := exec.Command("debugfs", "-R", "stat "+path, extPath(img)).CombinedOutput()
	m := reType.FindSubmatch(out)
	if m == nil {
		return inode{}
	}
	mode, _ := strconv.ParseUint(string(m[2]), 8, 32)
	in := inode{typ: string(m[1]), mode: uint32(mode), exists: true}
	if u := reUser.FindSubmatch(out); u != nil {
		in.uid, _ = strconv.Atoi(string(u[1]))
		in.gid, _ = strconv.Atoi(string(u[2]))
	}
	if l := reLink.FindSubmatch(out); l != nil {
		in.linkDest = string(l[1])
	}
	return in
}

func cat(t *testing.T, img, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, extPath(img)).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", path, err)
	}
	return string(out)
}

func bootCat(t *testing.T, img, name string) string {
	t.Helper()
	return sh(t, "mtype", "-i", fatPath(img), "::/"+name)
}

// armBinary returns the real ARMv6 build when `make pi` made it, else a small
// stand-in with a 32-bit ARM ELF header (the script checks only the header).
func armBinary(t *testing.T, size int) string {
	t.Helper()
	if size == 0 {
		if _, err := os.Stat("../dist/quiot-linux-armv6"); err == nil {
			return "../dist/quiot-linux-armv6"
		}
		size = 3 << 20
	}
	b := make([]byte, size)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 1, 1, 1})
	binary.LittleEndian.PutUint16(b[16:], 2)  // ET_EXEC
	binary.LittleEndian.PutUint16(b[18:], 40) // EM_ARM
	for i := 64; i < len(b); i += 4096 {
		b[i] = byte(i) // not sparse
	}
	p := filepath.Join(t.TempDir(), "quiot-linux-armv6")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func runScript(img string, args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{"./sdcard.sh", img}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/sbin:/usr/sbin")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSDCard(t *testing.T) {
	tools(t)
	img := makeImage(t, imageSpec{})
	bin := armBinary(t, 0)
	certs := t.TempDir()
	for name, body := range map[string]string{"ca.crt": "CA\n", "device.crt": "CERT\n", "device.key": "KEY\n", "pi-key.pem": "PEMKEY\n"} {
		if err := os.WriteFile(filepath.Join(certs, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(t.TempDir(), "quiot.toml")
	confBody := "[pub]\nbroker = \"https://broker.local:4433\"\ntopic = \"pi/temp\"\nsensor = \"thermal\"\n"
	if err := os.WriteFile(conf, []byte(confBody), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runScript(img, "--role", "pub", "--config", conf, "--certs", certs, "--hostname", "pi-kitchen",
		"--wifi", "homenet:correct horse", "--wifi-country", "DE", "--user", "admin:secret", "--binary", bin)
	if err != nil {
		t.Fatalf("sdcard.sh: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))

	passwd := cat(t, img, "/etc/passwd")
	m := regexp.MustCompile(`(?m)^quiot:x:(\d+):(\d+):[^:]*:/var/lib/quiot:/usr/sbin/nologin$`).FindStringSubmatch(passwd)
	if m == nil {
		t.Fatalf("no quiot user in /etc/passwd:\n%s", passwd)
	}
	qgid, _ := strconv.Atoi(m[2])
	binBytes, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	files := []struct {
		path     string
		mode     uint32
		uid, gid int
		content  string
	}{
		{"/usr/bin/quiot", 0o755, 0, 0, string(binBytes)},
		{"/etc/quiot/quiot.toml", 0o640, 0, qgid, confBody},
		{"/etc/quiot/ca.crt", 0o644, 0, 0, "CA\n"},
		{"/etc/quiot/device.crt", 0o644, 0, 0, "CERT\n"},
		{"/etc/quiot/device.key", 0o640, 0, qgid, "KEY\n"},
		{"/etc/quiot/pi-key.pem", 0o640, 0, qgid, "PEMKEY\n"},
		{"/etc/systemd/system/quiot-broker.service", 0o644, 0, 0, readFile(t, "../build/systemd/quiot-broker.service")},
		{"/etc/systemd/system/quiot-pub@.service", 0o644, 0, 0, readFile(t, "../build/systemd/quiot-pub@.service")},
		{"/etc/systemd/system/quiot-sub@.service", 0o644, 0, 0, readFile(t, "../build/systemd/quiot-sub@.service")},
		{"/etc/sysctl.d/60-quiot.conf", 0o644, 0, 0, readFile(t, "../build/sysctl.d/60-quiot.conf")},
		{"/etc/hostname", 0o644, 0, 0, "pi-kitchen\n"},
		{"/etc/NetworkManager/system-connections/quiot-wifi.nmconnection", 0o600, 0, 0, ""},
		{"/etc/shadow", 0o640, 0, -1, ""},
		{"/etc/gshadow", 0o640, 0, -1, ""},
		{"/etc/passwd", 0o644, 0, 0, ""},
		{"/etc/group", 0o644, 0, 0, ""},
	}
	for _, f := range files {
		t.Run("file"+f.path, func(t *testing.T) {
			in := stat(t, img, f.path)
			if !in.exists || in.typ != "regular" {
				t.Fatalf("%s: %+v, want a regular file", f.path, in)
			}
			if in.mode != f.mode || in.uid != f.uid || (f.gid >= 0 && in.gid != f.gid) {
				t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", f.path, in.mode, in.uid, in.gid, f.mode, f.uid, f.gid)
			}
			if f.content != "" && cat(t, img, f.path) != f.content {
				t.Errorf("%s: content differs", f.path)
			}
		})
	}
	if d := stat(t, img, "/etc/quiot"); d.typ != "directory" || d.mode != 0o750 || d.gid != qgid {
		t.Errorf("/etc/quiot: %+v, want directory 0750 group quiot", d)
	}
	link := stat(t, img, "/etc/systemd/system/multi-user.target.wants/quiot-pub@quiot.service")
	if link.typ != "symlink" || link.linkDest != "/etc/systemd/system/quiot-pub@.service" {
		t.Errorf("wants link: %+v", link)
	}
	group := cat(t, img, "/etc/group")
	for _, want := range []string{"\ngpio:x:997:pi,quiot\n", fmt.Sprintf("\nquiot:x:%d:\n", qgid)} {
		if !strings.Contains(group, want) {
			t.Errorf("/etc/group lacks %q:\n%s", want, group)
		}
	}
	if !strings.Contains(cat(t, img, "/etc/gshadow"), "\ngpio:!::pi,quiot\n") {
		t.Error("gshadow: quiot not in gpio")
	}
	if !regexp.MustCompile(`(?m)^quiot:\*:\d+:`).MatchString(cat(t, img, "/etc/shadow")) {
		t.Error("shadow: no locked quiot entry")
	}
	if os.Getuid() == 0 {
		if st := stat(t, img, "/etc/shadow"); st.gid != 42 {
			t.Errorf("/etc/shadow group %d, want 42 (shadow) kept", st.gid)
		}
	}
	if hosts := cat(t, img, "/etc/hosts"); !strings.Contains(hosts, "127.0.1.1\tpi-kitchen\n") || strings.Contains(hosts, "raspberrypi") {
		t.Errorf("/etc/hosts:\n%s", hosts)
	}
	nm := cat(t, img, "/etc/NetworkManager/system-connections/quiot-wifi.nmconnection")
	for _, want := range []string{"ssid=homenet\n", "psk=correct horse\n", "type=wifi\n", "key-mgmt=wpa-psk\n"} {
		if !strings.Contains(nm, want) {
			t.Errorf("nmconnection lacks %q", want)
		}
	}
	boot := sh(t, "mdir", "-b", "-i", fatPath(img), "::/")
	for _, want := range []string{"::/ssh", "::/userconf.txt", "::/cmdline.txt"} {
		if !strings.Contains(boot, want+"\n") {
			t.Errorf("boot partition lacks %s:\n%s", want, boot)
		}
	}
	if uc := bootCat(t, img, "userconf.txt"); !strings.HasPrefix(uc, "admin:$6$") {
		t.Errorf("userconf.txt = %q", uc)
	}
	if cl := bootCat(t, img, "cmdline.txt"); !strings.Contains(cl, "rootwait cfg80211.ieee80211_regdom=DE") {
		t.Errorf("cmdline.txt = %q", cl)
	}
	sh(t, "e2fsck", "-fn", extPath(img))

	t.Run("rerun switches role", func(t *testing.T) {
		out, err := runScript(img, "--role", "broker", "--binary", bin)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if stat(t, img, "/etc/systemd/system/multi-user.target.wants/quiot-pub@quiot.service").exists {
			t.Error("old role's link still there")
		}
		if l := stat(t, img, "/etc/systemd/system/multi-user.target.wants/quiot-broker.service"); l.linkDest != "/etc/systemd/system/quiot-broker.service" {
			t.Errorf("broker link: %+v", l)
		}
		if l := stat(t, img, "/etc/systemd/system/multi-user.target.wants/ssh.service"); l.linkDest != "/lib/systemd/system/ssh.service" {
			t.Errorf("unrelated wants link changed: %+v", l)
		}
		if n := strings.Count(cat(t, img, "/etc/passwd"), "\nquiot:"); n != 1 {
			t.Errorf("%d quiot users after a second run", n)
		}
		if g := cat(t, img, "/etc/group"); strings.Count(g, "quiot") != 2 {
			t.Errorf("/etc/group after rerun:\n%s", g)
		}
		if cat(t, img, "/etc/quiot/quiot.toml") != readFile(t, "../build/config/quiot.toml") {
			t.Error("default config not written")
		}
		sh(t, "e2fsck", "-fn", extPath(img))
	})
}

// TestSDCardLegacyWiFi: before Bookworm, Wi-Fi goes into wpa_supplicant.conf
// on the boot partition.
func TestSDCardLegacyWiFi(t *testing.T) {
	t.Parallel()
	tools(t)
	img := makeImage(t, imageSpec{osRelease: strings.ReplaceAll(strings.ReplaceAll(bookworm, "bookworm", "bullseye"), "12", "11")})
	out, err := runScript(img, "--role", "sub", "--wifi", "net:password1", "--wifi-country", "GB", "--no-ssh", "--binary", armBinary(t, 1<<20))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	w := bootCat(t, img, "wpa_supplicant.conf")
	for _, want := range []string{"country=GB", `ssid="net"`, `psk="password1"`} {
		if !strings.Contains(w, want) {
			t.Errorf("wpa_supplicant.conf lacks %s:\n%s", want, w)
		}
	}
	if strings.Contains(sh(t, "mdir", "-b", "-i", fatPath(img), "::/"), "::/ssh\n") {
		t.Error("--no-ssh wrote ssh")
	}
	if l := stat(t, img, "/etc/systemd/system/multi-user.target.wants/quiot-sub@quiot.service"); l.linkDest != "/etc/systemd/system/quiot-sub@.service" {
		t.Errorf("sub link: %+v", l)
	}
}

// TestSDCardRefuses: images that are not a Pi OS layout, or too small, are
// refused with a clear message and left byte-for-byte unchanged, with no
// working copy left behind.
func TestSDCardRefuses(t *testing.T) {
	tools(t)
	small := armBinary(t, 1<<20)
	tests := []struct {
		name string
		img  func(t *testing.T) string
		args []string
		want string
	}{
		{"no partition table", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "x.img")
			if err := os.WriteFile(p, bytes.Repeat([]byte{0xAB}, 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, nil, "is not a Raspberry Pi OS image: no partition table"},
		{"one partition", func(t *testing.T) string {
			return makeImage(t, imageSpec{table: fmt.Sprintf("label: dos\nunit: sectors\nstart=%d, size=%d, type=c\n", bootStart, bootSize)})
		}, nil, "needs a FAT boot partition 1 and an ext4 root partition 2"},
		{"root type not linux", func(t *testing.T) string {
			return makeImage(t, imageSpec{table: fmt.Sprintf("label: dos\nunit: sectors\nstart=%d, size=%d, type=c\nstart=%d, type=7\n", bootStart, bootSize, rootStart)})
		}, nil, "partition 2 has type 7, not Linux"},
		{"boot not formatted", func(t *testing.T) string { return makeImage(t, imageSpec{noFAT: true}) }, nil, "partition 1 is not a FAT file system"},
		{"no cmdline.txt", func(t *testing.T) string { return makeImage(t, imageSpec{bootFiles: []string{"readme.txt"}}) }, nil, "no cmdline.txt or config.txt"},
		{"plain Debian", func(t *testing.T) string {
			return makeImage(t, imageSpec{noRPi: true, osRelease: "ID=debian\nVERSION_CODENAME=bookworm\n"})
		}, nil, "no /etc/rpi-issue and /etc/os-release is not Raspbian"},
		{"root full", func(t *testing.T) string { return makeImage(t, imageSpec{rootMiB: 4}) },
			[]string{"--binary", "BIG"}, "not enough space in the root partition"},
		{"x86 binary", func(t *testing.T) string { return makeImage(t, imageSpec{}) },
			[]string{"--binary", "/bin/sh"}, "is not a 32-bit ARM ELF executable"},
		{"bad role", func(t *testing.T) string { return makeImage(t, imageSpec{}) },
			[]string{"--role", "relay"}, "--role must be broker, pub or sub"},
		{"bad wifi", func(t *testing.T) string { return makeImage(t, imageSpec{}) },
			[]string{"--wifi", "net:short"}, "passphrase must be 8 to 63"},
		{"bad hostname", func(t *testing.T) string { return makeImage(t, imageSpec{}) },
			[]string{"--hostname", "pi_1"}, "is not a valid host name"},
		{"CA key", func(t *testing.T) string { return makeImage(t, imageSpec{}) },
			[]string{"--certs", "CAKEY"}, "the CA's private key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			img := tc.img(t)
			before := sum(t, img)
			args := []string{"--binary", small}
			for i, a := range tc.args {
				switch a {
				case "BIG":
					tc.args[i] = armBinary(t, 6<<20)
				case "CAKEY":
					d := t.TempDir()
					for _, f := range []string{"ca.pem", "ca-key.pem"} {
						if err := os.WriteFile(filepath.Join(d, f), []byte("x"), 0o600); err != nil {
							t.Fatal(err)
						}
					}
					tc.args[i] = d
				}
			}
			args = append(args, tc.args...)
			out, err := runScript(img, args...)
			if err == nil {
				t.Fatalf("accepted:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("message %q lacks %q", strings.TrimSpace(out), tc.want)
			}
			if sum(t, img) != before {
				t.Error("image changed")
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(img), ".*sdcard*"))
			if len(left) > 0 {
				t.Errorf("working copies left behind: %v", left)
			}
		})
	}
}

func sum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
