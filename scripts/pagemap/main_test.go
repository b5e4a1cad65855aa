package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/testenv"
)

func TestPkgOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		depth int
		want  string
	}{
		{"runtime.mallocgc", 3, "runtime"},
		{"github.com/quic-go/quic-go/http3.(*Conn).OpenStream", 3, "github.com/quic-go/quic-go"},
		{"github.com/quic-go/quic-go/http3.(*Conn).OpenStream", 4, "github.com/quic-go/quic-go/http3"},
		{"github.com/nats-io/nats%2ego.init", 3, "github.com/nats-io/nats%2ego"},
		{"go:string.*", 3, "go:string"},
		{"nodot", 3, "nodot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pkgOf(tc.name, tc.depth); got != tc.want {
				t.Errorf("pkgOf(%q, %d) = %q, want %q", tc.name, tc.depth, got, tc.want)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"1"}, {"x", "bin"}, {"-3", "bin"}, {"self", "bin", "0"}, {"self", "/nonexistent/binary"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q): no error", args)
		}
	}
}

// TestSelf builds the tool without -s (go test strips its own binary) and
// runs it on its own process: its .text must have resident pages, runtime
// among the packages; given a stripped binary it must refuse.
func TestSelf(t *testing.T) {
	goBin := testenv.RequireTool(t, "go")
	bin := filepath.Join(t.TempDir(), "pagemap")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "self", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("pagemap self: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^\.text\s+(\d+)\s+(\d+)$`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no .text line in:\n%s", out)
	}
	if size, res := m[1], m[2]; res == "0" || size == "0" {
		t.Errorf(".text size %s KiB, resident %s KiB: want both > 0", size, res)
	}
	if !strings.Contains(string(out), ".text runtime\n") {
		t.Errorf("no resident runtime text in:\n%s", out)
	}

	// A stripped build: no symbols to attribute pages to.
	stripped := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.Command(goBin, "build", "-ldflags=-s -w", "-o", stripped, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "self", stripped).CombinedOutput(); err == nil || !strings.Contains(string(out), "no symbol table") {
		t.Errorf("pagemap self STRIPPED: err %v, want the symbol table error\n%s", err, out)
	}
}
