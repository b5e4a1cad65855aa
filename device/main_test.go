package main

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/quiot/quiot/internal/proctune"
)

// TestMain keeps the brokers that tests run in this process (runBroker)
// from choosing the test binary's GOMAXPROCS: it is the process's, and
// many tests run brokers beside each other. The brokers the tests start as
// processes of their own choose theirs as users' do; internal/proctune
// tests the choice.
func TestMain(m *testing.M) {
	applyProcs = func(context.Context, proctune.Mode, proctune.Options, *slog.Logger) proctune.Applied {
		n := runtime.GOMAXPROCS(0)
		return proctune.Applied{Mode: proctune.Mode{Fixed: n}, Max: n, Why: "in-process test"}
	}
	os.Exit(m.Run())
}
