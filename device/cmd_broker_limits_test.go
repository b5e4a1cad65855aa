package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
)

func TestBrokerLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want broker.Limits
		err  string
	}{
		{"defaults", nil, broker.Limits{}, ""},
		{"given", []string{"--max-conns", "50", "--max-conns-per-addr", "5", "--max-conns-per-identity", "3", "--max-subscriptions-per-identity", "7",
			"--max-subscriptions-total", "70", "--max-streams", "20", "--max-header-bytes", "8192", "--idle-timeout", "30s", "--stream-inflight", "16",
			"--max-topic-bytes", "128", "--max-topic-levels", "8"},
			broker.Limits{MaxConns: 50, MaxConnsPerAddr: 5, MaxConnsPerIdentity: 3, MaxSubscriptionsPerIdentity: 7, MaxSubscriptions: 70,
				MaxStreamsPerConn: 20, MaxHeaderBytes: 8192, IdleTimeout: 30 * time.Second, StreamInflight: 16,
				MaxTopicLength: 128, MaxTopicLevels: 8}, ""},
		{"negative topic levels", []string{"--max-topic-levels", "-1"}, broker.Limits{}, "--max-topic-levels"},
		{"negative", []string{"--max-conns", "-1"}, broker.Limits{}, "--max-conns"},
		{"negative idle", []string{"--idle-timeout", "-1s"}, broker.Limits{}, "--idle-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("broker", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f limitFlags
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var l broker.Limits
			err := f.apply(&l)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("apply: %v, want an error naming %s", err, tc.err)
				}
				return
			}
			if err != nil || l != tc.want {
				t.Fatalf("apply: %+v, %v; want %+v", l, err, tc.want)
			}
		})
	}
}
