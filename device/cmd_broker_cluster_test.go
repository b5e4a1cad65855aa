//go:build !arm || quiot_cluster

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestClusterFlags: the --cluster flags reach the cluster link's options
// (broker/node checks them), and bad combinations are usage errors naming
// the flag.
func TestClusterFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"none", nil, false},
		{"one server", []string{"--cluster", "nats://127.0.0.1:4222"}, false},
		{"several, token", []string{"--cluster", "nats://a:4222, tls://b:4222", "--cluster-token", "s3cret"}, false},
		{"user and password", []string{"--cluster", "nats://a:4222", "--cluster-user", "edge1", "--cluster-password", "pw"}, false},
		{"creds without cluster", []string{"--cluster-token", "x"}, true},
		{"not a nats url", []string{"--cluster", "http://a:4222"}, true},
		{"two credential kinds", []string{"--cluster", "nats://a:4222", "--cluster-token", "x", "--cluster-user", "u"}, true},
		{"cert without key", []string{"--cluster", "nats://a:4222", "--cluster-cert", "c.pem"}, true},
		{"negative hold", []string{"--cluster", "nats://a:4222", "--cluster-hold-messages", "-1"}, true},
		{"receive bytes", []string{"--cluster", "nats://a:4222", "--cluster-local-numbering", "--cluster-receive-bytes", "8MiB"}, false},
		{"negative receive bytes", []string{"--cluster", "nats://a:4222", "--cluster-receive-bytes", "-1"}, true},
		{"bad replicas", []string{"--cluster", "nats://a:4222", "--cluster-replicas", "7"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"--config", "", "--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--metrics-listen", "",
				"--log-level", "error", "--check-config"}, tt.args...)
			err := runBroker(context.Background(), args, &out, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("check: %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				if !strings.Contains(out.String(), "configuration OK") {
					t.Fatalf("stdout %q", out.String())
				}
				return
			}
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--cluster") {
				t.Fatalf("%v is not a usage error naming --cluster", err)
			}
		})
	}
}
