package spool

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procWriteBytes returns this process's write_bytes from /proc/self/io:
// bytes sent (or, for page-cache writes, dirtied) towards the block
// device, in whole pages: the closest userspace figure to what reaches an
// SD card (journal writes excluded). ok is false where it is unavailable.
func procWriteBytes() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// BenchmarkAppend measures each fsync policy: one publisher appending
// 100-byte payloads as fast as it can and a deliverer acknowledging each
// (as `quiot pub --spool` does), and the same with 8 appenders at once
// (group commit). It reports write(2) bytes, disk bytes (/proc/self/io
// write_bytes; run it on a real disk, not tmpfs) and fsyncs per message.
//
//	go test -run '^$' -bench Append -benchtime 2000x ./internal/spool/
func BenchmarkAppend(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 100)
	for _, p := range []Fsync{FsyncAlways, FsyncInterval, FsyncNever} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("fsync=%s/appenders=%d", p, par), func(b *testing.B) {
				s, err := Open(Options{Dir: b.TempDir(), Fsync: p, FsyncInterval: 100e6, Logger: discard()})
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan struct{})
				go func() { // the deliverer
					defer close(done)
					for {
						m, err := s.Next(b.Context())
						if err != nil {
							return
						}
						s.Ack(m.ID)
					}
				}()
				w0, ok := procWriteBytes()
				b.ResetTimer()
				b.SetParallelism(par)
				if par == 1 {
					for b.Loop() {
						if _, err := s.Append(b.Context(), Message{Topic: "sensors/dev-1/temp", Payload: payload, QoS: 1}); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if _, err := s.Append(b.Context(), Message{Topic: "sensors/dev-1/temp", Payload: payload, QoS: 1}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				if err := s.WaitEmpty(b.Context()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				st := s.Stats()
				s.Close()
				<-done
				w1, _ := procWriteBytes()
				n := float64(st.Appended)
				b.ReportMetric(float64(st.BytesWritten)/n, "bytes/msg")
				b.ReportMetric(float64(st.Fsyncs)/n, "fsyncs/msg")
				b.ReportMetric(float64(st.Writes)/n, "writes/msg")
				if ok {
					b.ReportMetric(float64(w1-w0)/n, "disk-bytes/msg")
				}
			})
		}
	}
}

// BenchmarkAppendPaced appends at a steady 200 messages/s (one every 5
// ms, as a sensor would) with a deliverer acknowledging each, so the
// interval policies show what they cost at a real rate: each fsync writes
// the partly filled last page again.
//
//	go test -run '^$' -bench AppendPaced -benchtime 400x ./internal/spool/
func BenchmarkAppendPaced(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 100)
	policies := []struct {
		name  string
		p     Fsync
		every time.Duration
	}{
		{"always", FsyncAlways, 0},
		{"interval=100ms", FsyncInterval, 100 * time.Millisecond},
		{"interval=1s", FsyncInterval, time.Second},
		{"never", FsyncNever, 0},
	}
	for _, pol := range policies {
		b.Run("fsync="+pol.name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), Fsync: pol.p, FsyncInterval: pol.every, Logger: discard()})
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				for {
					m, err := s.Next(b.Context())
					if err != nil {
						return
					}
					s.Ack(m.ID)
				}
			}()
			w0, ok := procWriteBytes()
			tk := time.NewTicker(5 * time.Millisecond)
			defer tk.Stop()
			for b.Loop() {
				<-tk.C
				if _, err := s.Append(b.Context(), Message{Topic: "sensors/dev-1/temp", Payload: payload, QoS: 1}); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.WaitEmpty(b.Context()); err != nil {
				b.Fatal(err)
			}
			st := s.Stats()
			s.Close()
			w1, _ := procWriteBytes()
			n := float64(st.Appended)
			b.ReportMetric(float64(st.BytesWritten)/n, "bytes/msg")
			b.ReportMetric(float64(st.Fsyncs)/n, "fsyncs/msg")
			if ok {
				b.ReportMetric(float64(w1-w0)/n, "disk-bytes/msg")
			}
		})
	}
}
