package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/store"
	"github.com/quiot/quiot/internal/testutil"
)

// writeBytes is this process's bytes sent to the block layer so far
// (/proc/self/io write_bytes: page-cache writeback it caused, fsyncs
// included), or -1.
func writeBytes() int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkPublishQoS1 publishes QoS 1 messages (64-byte payload, 16
// topics) through a broker with a store (the publisher waits for the
// commit) or without (memory), from 1 or 16 concurrent publishers, and
// reports the disk bytes written and the commits (2 fsyncs each in bbolt)
// per message. The history is full from the start (steady state: every
// message also evicts one).
//
//	go test -run '^$' -bench PublishQoS1 -benchtime 5000x ./broker/store/
func BenchmarkPublishQoS1(b *testing.B) {
	for _, mode := range []string{"memory", "store"} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/publishers=%d", mode, par), func(b *testing.B) {
				l := broker.Limits{HistoryPerTopic: 64}
				o := &broker.Options{Certificates: pkiCerts(testutil.NewPKI(b)), Limits: l, Logger: testutil.DiscardLogger()}
				var st *store.Store
				if mode == "store" {
					var err error
					st, err = store.Open(store.Options{Dir: b.TempDir(), Logger: testutil.DiscardLogger()})
					if err != nil {
						b.Fatal(err)
					}
					o.Store = st
				}
				br, err := broker.New(o)
				if err != nil {
					b.Fatal(err)
				}
				defer br.Close()
				payload := make([]byte, 64)
				pub := func(i int) {
					if _, err := br.Publish(context.Background(), broker.Message{Topic: "bench/t" + strconv.Itoa(i%16), Payload: payload, QoS: 1}); err != nil {
						b.Error(err)
					}
				}
				for i := range 16 * 64 { // fill the history
					pub(i)
				}
				var s0 store.Stats
				if st != nil {
					s0 = st.Stats()
				}
				w0 := writeBytes()
				b.ResetTimer()
				var wg sync.WaitGroup
				per := b.N / par
				for p := range par {
					wg.Go(func() {
						for i := range per {
							pub(p*per + i)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				n := float64(per * par)
				if w := writeBytes(); w >= 0 && w0 >= 0 {
					b.ReportMetric(float64(w-w0)/n, "disk-B/msg")
				}
				if st != nil {
					s := st.Stats()
					b.ReportMetric(float64(s.Commits-s0.Commits)/n, "commits/msg")
				}
			})
		}
	}
}

// BenchmarkRestart16MiB is the broker's restart with 16 MiB of history in
// the store (the default HistoryBytes, filled with 1 KiB messages on 64
// topics): open the data directory, load and replay it, and close.
//
//	go test -run '^$' -bench Restart16MiB -benchtime 10x ./broker/store/
func BenchmarkRestart16MiB(b *testing.B) {
	dir := b.TempDir()
	pki := testutil.NewPKI(b)
	open := func() *broker.Broker {
		st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		br, err := broker.New(&broker.Options{Certificates: pkiCerts(pki), Store: st, Logger: testutil.DiscardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		return br
	}
	br := open()
	payload := make([]byte, 1024)
	for i := 0; br.Stats().HistoryBytes < 16<<20-4096; i++ {
		// Mostly QoS 0 (no wait per message: the commits batch by
		// themselves); every 512th waits for its commit.
		qos := byte(0)
		if i%512 == 511 {
			qos = 1
		}
		if _, err := br.Publish(context.Background(), broker.Message{Topic: "restart/t" + strconv.Itoa(i%64), Payload: payload, QoS: qos}); err != nil {
			b.Fatal(err)
		}
	}
	s := br.Stats()
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, store.FileName))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		br := open()
		if got := br.Stats().HistoryMessages; got != s.HistoryMessages {
			b.Fatalf("restored %d messages, want %d", got, s.HistoryMessages)
		}
		if err := br.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(s.HistoryMessages), "history-msgs")
	b.ReportMetric(float64(s.HistoryBytes)/(1<<20), "history-MiB")
	b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
}
