package mqtt

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// controlCounter is a socket whose Control calls are counted; closed makes
// them fail as on a closed connection.
type controlCounter struct {
	syscall.RawConn
	calls int
}

func (c *controlCounter) Control(f func(fd uintptr)) error {
	c.calls++
	f(^uintptr(0)) // no descriptor: the epoll instance refuses it
	return nil
}

// quiot (change 27): the once-a-second sweep looks for sockets closed
// under their clients every closedEvery sweeps, not on every pass (a
// Control call on every resting socket, every second), and ends a
// client past its keep-alive from the bound kept in pollState.
func TestSweepChecksClosedEveryFewSweeps(t *testing.T) {
	p := &poller{fds: map[int]*pollState{}}
	now := time.Unix(10_000, 0)
	rcs := make([]*controlCounter, 10)
	for i := range rcs {
		rcs[i] = &controlCounter{}
		ps := &pollState{p: p, rc: rcs[i], fd: i, limit: 90 * time.Second, pd: &Polled{}}
		ps.st.Store(psIdle)
		ps.lastRx.Store(now.UnixNano())
		p.fds[i] = ps
	}
	calls := func() (n int) {
		for _, rc := range rcs {
			n += rc.calls
		}
		return n
	}
	for i := 1; i < closedEvery; i++ {
		p.sweep(now.Add(time.Duration(i) * time.Second))
	}
	require.Equal(t, 0, calls(), "Control calls before the closedEvery-th sweep")
	p.sweep(now.Add(closedEvery * time.Second))
	require.Equal(t, len(rcs), calls(), "one Control call a resting client on the closedEvery-th sweep")
	require.Len(t, p.fds, len(rcs), "nothing ended")
}

// TestSweepEndsLate: a client past its bound ends with a keep-alive
// error; a client with no keep-alive stays however long it is silent.
// (A socket closed under its client: TestPollerEnds.)
func TestSweepEndsLate(t *testing.T) {
	ep, err := newEpoll()
	require.NoError(t, err)
	defer ep.close()
	p := &poller{fds: map[int]*pollState{}, ep: ep}
	now := time.Unix(10_000, 0)
	ended := make(chan string, 3)
	add := func(fd int, limit time.Duration, quiet time.Duration) {
		ps := &pollState{p: p, cl: &Client{}, rc: &controlCounter{}, fd: fd, limit: limit, pd: &Polled{}}
		ps.st.Store(psIdle)
		ps.lastRx.Store(now.Add(-quiet).UnixNano())
		ps.pd.then = []func(error) error{func(err error) error {
			if err == nil {
				ended <- strconv.Itoa(fd) + ": nil"
			} else {
				ended <- strconv.Itoa(fd) + ": " + err.Error()
			}
			return nil
		}}
		p.fds[fd] = ps
	}
	add(1, 90*time.Second, 91*time.Second) // late
	add(2, 90*time.Second, 10*time.Second) // in time
	add(3, 0, time.Hour)                   // no keep-alive
	p.sweep(now)
	select {
	case got := <-ended:
		require.Equal(t, "1: read: no packet in 1m30s (keep-alive): i/o timeout", got)
	case <-time.After(30 * time.Second):
		t.Fatal("the late client did not end")
	}
	require.Len(t, p.fds, 2)
	require.Contains(t, p.fds, 2)
	require.Contains(t, p.fds, 3)
	runtime.Gosched()
	select {
	case got := <-ended:
		t.Fatalf("ended %s", got)
	default:
	}
}

// TestAddEndsStaleClientOnReusedNumber: a socket closed under its client
// left the poll without an event; when a new socket gets its number
// before a sweep found it, adding the new one ends the old client (it
// was overwritten in the poller's table and never ended).
func TestAddEndsStaleClientOnReusedNumber(t *testing.T) {
	ep, err := newEpoll()
	require.NoError(t, err)
	defer ep.close()
	p := &poller{fds: map[int]*pollState{}, ep: ep}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	rc, err := r.SyscallConn()
	require.NoError(t, err)
	ended := make(chan error, 1)
	old := &pollState{p: p, cl: &Client{}, rc: rc, pd: &Polled{then: []func(error) error{func(err error) error { ended <- err; return nil }}}}
	old.st.Store(psIdle)
	require.NoError(t, p.add(old, true))
	p.ep.del(old.fd) // as closing the socket would
	fresh := &pollState{p: p, cl: &Client{}, rc: rc, pd: &Polled{}}
	require.NoError(t, p.add(fresh, true))
	select {
	case err := <-ended:
		require.ErrorIs(t, err, ErrConnectionClosed)
	case <-time.After(30 * time.Second):
		t.Fatal("the client whose number was reused did not end")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Same(t, fresh, p.fds[fresh.fd])
}
