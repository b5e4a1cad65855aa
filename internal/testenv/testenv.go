// Package testenv gates tests on the tools and privileges they need.
//
// Outside CI a test whose tool is missing skips and says why. Under CI=true
// (how .ci/run is started) a missing tool fails the test instead: CI installs
// every tool through scripts/deps.sh, so a skip there would hide an untested
// path.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under CI (the environment variable CI
// is "true" or "1").
func InCI() bool {
	v := os.Getenv("CI")
	return v == "true" || v == "1"
}

// Unavailable skips t with the reason outside CI and fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true, but "+format+" (scripts/deps.sh installs it)", args...)
	}
	t.Skipf(format, args...)
}

// RequireTool returns the path of the named program, or stops the test
// (Unavailable) when it is not on PATH nor in /usr/sbin or /sbin.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin/", "/sbin/"} {
		if st, err := os.Stat(dir + name); err == nil && st.Mode()&0o111 != 0 {
			return dir + name
		}
	}
	Unavailable(t, "%s not found on PATH", name)
	return ""
}

// RequireRoot stops the test (Unavailable) unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root (network namespaces, raw sockets or OVS)")
	}
}
