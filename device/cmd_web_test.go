package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func TestBrokerWebUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"broker", "--dev", "--cors-origins", "ftp://app.example"},
		{"broker", "--dev", "--cors-origins", "https://app.example/path"},
		{"broker", "--dev", "--session-ttl", "0s"},
	} {
		if code := run(loopbackBrokerArgs(args...), io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestBrokerDashboardFlags: `quiot broker --dev --cors-origins O` serves
// the dashboard at / and answers O's preflight; --dashboard=false serves
// no page.
func TestBrokerDashboardFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantPage int
	}{
		{name: "default", args: []string{"--cors-origins", "https://app.example"}, wantPage: http.StatusOK},
		{name: "off", args: []string{"--cors-origins", "https://app.example", "--dashboard=false"}, wantPage: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			args := append([]string{"--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--log-level", "error"}, tc.args...)
			go func() {
				done <- runBroker(ctx, loopbackBrokerArgs(args...), pw, io.Discard)
				pw.Close()
			}()
			t.Cleanup(func() {
				cancel()
				select {
				case err := <-done:
					if err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("broker command: %v", err)
					}
				case <-time.After(30 * time.Second):
					t.Error("broker command did not return")
				}
			})
			var addr string
			sc := bufio.NewScanner(pr)
			for addr == "" && sc.Scan() {
				if _, a, ok := strings.Cut(sc.Text(), "broker listening: https://"); ok {
					addr, _, _ = strings.Cut(a, " ")
				}
			}
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			if addr == "" {
				t.Fatal("no address printed")
			}
			tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // a throwaway --dev certificate
			t.Cleanup(func() { _ = tr.Close() })
			hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			resp, err := hc.Get("https://" + addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantPage || (tc.wantPage == http.StatusOK && !strings.Contains(string(body), "<title>quiot broker</title>")) {
				t.Fatalf("GET /: %d %.80q", resp.StatusCode, body)
			}
			req, _ := http.NewRequest(http.MethodOptions, "https://"+addr+"/v1/topics/a", nil)
			req.Header.Set("Origin", "https://app.example")
			req.Header.Set("Access-Control-Request-Method", "GET")
			resp, err = hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
				t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
			}
		})
	}
}
