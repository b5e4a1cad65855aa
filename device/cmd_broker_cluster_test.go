//go:build !arm || quiot_cluster

package main

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/quiot/quiot/broker"
)

// TestClusterFlags: the --cluster flags make a link for the broker's
// options, and bad combinations are usage errors naming the problem.
func TestClusterFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		link    bool
	}{
		{"none", nil, false, false},
		{"one server", []string{"--cluster", "nats://127.0.0.1:4222"}, false, true},
		{"several, token", []string{"--cluster", "nats://a:4222, tls://b:4222", "--cluster-token", "s3cret"}, false, true},
		{"user and password", []string{"--cluster", "nats://a:4222", "--cluster-user", "edge1", "--cluster-password", "pw"}, false, true},
		{"creds without cluster", []string{"--cluster-token", "x"}, true, false},
		{"not a nats url", []string{"--cluster", "http://a:4222"}, true, false},
		{"two credential kinds", []string{"--cluster", "nats://a:4222", "--cluster-token", "x", "--cluster-user", "u"}, true, false},
		{"cert without key", []string{"--cluster", "nats://a:4222", "--cluster-cert", "c.pem"}, true, false},
		{"negative hold", []string{"--cluster", "nats://a:4222", "--cluster-hold-messages", "-1"}, true, false},
		{"bad replicas", []string{"--cluster", "nats://a:4222", "--cluster-replicas", "7"}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f clusterFlags
			fs := flag.NewFlagSet("broker", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			var o broker.Options
			err := f.configure(&o, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("configure: %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, errUsage) {
				t.Fatalf("%v is not a usage error", err)
			}
			if (o.Cluster != nil) != tt.link {
				t.Fatalf("link %v, want %v", o.Cluster != nil, tt.link)
			}
			if f.link != nil {
				_ = f.link.Close()
			}
		})
	}
}
