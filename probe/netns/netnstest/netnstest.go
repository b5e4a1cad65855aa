// Package netnstest holds the test helpers of code that needs network
// namespaces: a check that skips (saying why) when the test is not root or a
// tool is missing, and a throwaway generator -> ingress -> egress -> sink
// path that is torn down when the test ends, also when it fails.
package netnstest

import (
	"testing"

	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/probe/netns"
)

// NeedRoot skips t unless it runs as root with ip, ethtool and the extra
// tools on PATH.
func NeedRoot(t testing.TB, tools ...string) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range append([]string{"ip", "ethtool"}, tools...) {
		testenv.RequireTool(t, tool)
	}
}

// NewPath builds a netns.Path (joined by a plain Linux bridge when bridge is
// true) and removes it when t ends.
func NewPath(t testing.TB, bridge bool) *netns.Path {
	t.Helper()
	p, err := netns.NewPath(netns.PathOptions{Bridge: bridge})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}
