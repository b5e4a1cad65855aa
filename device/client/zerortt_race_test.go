package client

import "testing"

// skipZeroRTTUnderRace skips a test that opens streams in 0-RTT when the
// race detector is on: quic-go v0.65 writes the server's transport
// parameters on its connection goroutine while a stream opened in 0-RTT
// reads them (quic-go issue 4303, open upstream; the race detector saw it
// in 2 of 30 runs of TestH3FileSessionCacheAcrossProcesses). It is not
// quiot's code; these tests run in make test's pass without -race.
func skipZeroRTTUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("0-RTT streams race in quic-go v0.65 (upstream issue 4303, open): runs without -race")
	}
}
