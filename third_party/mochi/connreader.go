package mqtt

import (
	"io"
	"sync"
)

// idleReadSize is the room a client's reader waits for its next packet in.
// A read that fills it is likely followed by more bytes, so the next read
// goes to a pooled buffer of ClientNetReadBufferSize.
const idleReadSize = 128

// readBufPools holds the pooled read buffers, one sync.Pool per size
// (*sync.Pool of *[]byte).
var readBufPools sync.Map

// readBufPool returns the pool of read buffers of size bytes.
func readBufPool(size int) *sync.Pool {
	if p, ok := readBufPools.Load(size); ok {
		return p.(*sync.Pool)
	}
	p, _ := readBufPools.LoadOrStore(size, &sync.Pool{New: func() any {
		b := make([]byte, size)
		return &b
	}})
	return p.(*sync.Pool)
}

// connReader is a client's buffered reader, in place of a bufio.Reader.
// quiot: a bufio.Reader holds its ClientNetReadBufferSize buffer for the
// life of the connection, and an idle client spends its life waiting for
// a read into it. connReader waits in a small array of its own and takes a
// buffer of ClientNetReadBufferSize from a pool only while bytes come in
// faster than that array holds, giving it back once its bytes are read
// (QUIOT.md). One goroutine reads at a time (the client's reader).
type connReader struct {
	src  io.Reader
	size int        // the size of a pooled buffer
	pool *sync.Pool // nil if size is no larger than the idle array
	big  *[]byte    // the pooled buffer, while held
	buf  []byte     // buf[r:w] are buffered: idle[:] or *big
	r, w int
	full bool  // the last read filled buf
	err  error // the error of a read that also returned bytes, for the next call
	idle [idleReadSize]byte
}

// newConnReader returns a reader of src whose pooled buffers hold size
// bytes.
func newConnReader(src io.Reader, size int) *connReader {
	b := &connReader{src: src, size: size}
	if size > idleReadSize {
		b.pool = readBufPool(size)
	}
	b.buf = b.idle[:]
	return b
}

// Buffered is the number of bytes read from the source and not yet from
// the reader.
func (b *connReader) Buffered() int { return b.w - b.r }

// release gives a held pooled buffer back; the reader is empty.
func (b *connReader) release() {
	if b.big != nil {
		b.pool.Put(b.big)
		b.big = nil
		b.buf = b.idle[:]
	}
}

// fill reads into the empty reader: into the pooled buffer if the last
// read filled its buffer, else into the idle array.
func (b *connReader) fill() error {
	if b.err != nil {
		err := b.err
		b.err = nil
		return err
	}
	if b.full && b.pool != nil {
		if b.big == nil {
			b.big = b.pool.Get().(*[]byte)
			b.buf = *b.big
		}
	} else {
		b.release()
	}
	b.r, b.w = 0, 0
	for i := 0; i < 100; i++ { // as bufio: at most 100 empty reads in a row
		n, err := b.src.Read(b.buf)
		if n < 0 || n > len(b.buf) {
			return io.ErrNoProgress
		}
		b.w, b.full = n, n == len(b.buf)
		if n > 0 {
			b.err = err
			return nil
		}
		if err != nil {
			b.full = false
			return err
		}
	}
	return io.ErrNoProgress
}

// ReadByte reads one byte.
func (b *connReader) ReadByte() (byte, error) {
	if b.r == b.w {
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	c := b.buf[b.r]
	b.r++
	return c, nil
}

// Read reads into p what is buffered or, if nothing is, from one read of
// the source (straight into p if p is at least a pooled buffer's size).
func (b *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= b.size && b.err == nil {
			b.release()
			b.full = false
			return b.src.Read(p)
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}
