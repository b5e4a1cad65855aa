package mqtt

import (
	"runtime"
	"sync"

	"github.com/mochi-mqtt/server/v2/packets"
)

// quiot: packet handling on a pooled worker goroutine (QUIOT.md, change 11).
//
// A client's reader goroutine lives as long as its connection and spends
// that life waiting for the next packet on a small stack. Handling a
// packet takes far more: mochi passes its ~800-byte packets.Packet by
// value through deep frames (ReadPacket, Hooks.OnPacketRead, processPacket,
// processSubscribe, publishRetainedToClient, quiot's hooks), so a CONNECT,
// SUBSCRIBE, PUBLISH or even a PUBACK grew the reader's stack to 16 KiB,
// and the collector gives that back only by halving it once per
// collection: thousands of clients that had just connected held 16 KiB of
// stack each.
//
// The reader now only waits for and decodes the fixed header; it hands the
// rest (reading and decoding the packet's body, the hooks, the handlers)
// to a worker goroutine and waits for it. The hand-off is synchronous, so
// each client's packets are handled one at a time and in order, and a
// client whose handling blocks (its write queue full, a retained replay
// waiting for room) holds its reader exactly as before: back-pressure is
// unchanged. A worker that has finished goes back to an idle pool; a
// reader that finds none idle starts one, so a worker blocked in one
// client's handling never delays another client. At most maxIdleWorkers
// wait idle; a worker given back beyond that exits, and its grown stack is
// freed with it.
//
// Passing the packet by pointer through the deep frames instead would
// change exported API (the hooks take and return packets.Packet by value,
// and quiot's and others' hooks implement them) and would still leave
// every hook's own frame on the reader. A goroutine per packet would cost
// a goroutine start and a stack growth on every packet. A pooled worker
// costs two goroutine switches per packet (0.4-1.2 µs of CPU on a loaded
// 2-core host; BenchmarkReadPublish, QUIOT.md) and the few idle workers'
// stacks.

// handoff describes the work a reader hands to a worker: with handler set,
// reading and handling the packet whose fixed header is fh; with handler
// nil, admitting the client whose CONNECT header is fh and establishing
// its session (Server.admitAndEstablish).
type handoff struct {
	poll     *pollState // quiot: a polled client's buffered packets (poller.drain), run without a waiter
	cl       *Client
	fh       packets.FixedHeader
	handler  ReadFn
	s        *Server
	listener string
}

// worker is a goroutine that runs one handoff at a time.
type worker struct {
	job   handoff
	err   error
	start chan struct{} // a job is in job; closed: exit
	done  chan struct{} // the job is done, its result in err
}

// workers holds the idle workers, the most recently used last.
var workers struct {
	mu   sync.Mutex
	idle []*worker
}

// maxIdleWorkers is how many idle workers wait for work; a few per
// processor, as that many can run at once and a few more may be between
// packets.
func maxIdleWorkers() int {
	return 4 * runtime.GOMAXPROCS(0)
}

// handOffPacket reads and handles, on a worker, the packet whose fixed
// header is fh, and returns the handler's error once it is done. fh is
// copied: the reader's frame keeps only its own header, and none is
// allocated.
//
//go:noinline
func handOffPacket(cl *Client, fh *packets.FixedHeader, handler ReadFn) error {
	w := takeWorker()
	w.job = handoff{cl: cl, fh: *fh, handler: handler}
	return w.runJob()
}

// handOffConnect admits, on a worker, the client whose CONNECT's fixed
// header is fh and establishes its session (Server.admitAndEstablish).
//
//go:noinline
func handOffConnect(s *Server, cl *Client, listener string, fh *packets.FixedHeader) error {
	w := takeWorker()
	w.job = handoff{cl: cl, fh: *fh, s: s, listener: listener}
	return w.runJob()
}

// runJob runs w.job on w, waits for it and gives w back.
func (w *worker) runJob() error {
	w.start <- struct{}{}
	<-w.done
	err := w.err
	w.job, w.err = handoff{}, nil
	giveWorker(w)
	return err
}

// takeWorker returns an idle worker, or a new one if none is idle.
func takeWorker() *worker {
	workers.mu.Lock()
	if n := len(workers.idle); n > 0 {
		w := workers.idle[n-1]
		workers.idle[n-1] = nil
		workers.idle = workers.idle[:n-1]
		workers.mu.Unlock()
		return w
	}
	workers.mu.Unlock()
	w := &worker{start: make(chan struct{}, 1), done: make(chan struct{}, 1)}
	go w.run()
	return w
}

// giveWorker returns w, done with its job, to the idle pool, or ends it if
// the pool is full.
func giveWorker(w *worker) {
	workers.mu.Lock()
	if len(workers.idle) < maxIdleWorkers() {
		workers.idle = append(workers.idle, w)
		workers.mu.Unlock()
		return
	}
	workers.mu.Unlock()
	close(w.start)
}

// run runs the jobs handed to w until w.start is closed.
func (w *worker) run() {
	for range w.start {
		if ps := w.job.poll; ps != nil { // nobody waits: the worker gives itself back
			w.job = handoff{}
			ps.p.drain(ps)
			giveWorker(w)
			continue
		}
		w.err = w.job.do()
		w.done <- struct{}{}
	}
}

// do runs the job on the calling goroutine.
func (j *handoff) do() error {
	if j.handler == nil {
		return j.s.admitAndEstablish(j.cl, j.listener, &j.fh)
	}
	return j.cl.handleNext(&j.fh, j.handler)
}

// idleWorkers returns how many workers wait idle (for tests).
func idleWorkers() int {
	workers.mu.Lock()
	defer workers.mu.Unlock()
	return len(workers.idle)
}
