package space

// ring is a growable FIFO queue.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) push(v T) {
	if r.size == len(r.buf) {
		n := 2 * len(r.buf)
		if n == 0 {
			n = 8
		}
		nb := make([]T, n)
		for i := 0; i < r.size; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring[T]) front() T { return r.buf[r.head] }

func (r *ring[T]) at(i int) T { return r.buf[(r.head+i)%len(r.buf)] }

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}

// shrink releases a large buffer once the ring is empty.
func (r *ring[T]) shrink() {
	if r.size == 0 && len(r.buf) > 64 {
		r.buf, r.head = nil, 0
	}
}
