package quicgov

import "container/list"

// lru is a map bounded to max entries that evicts its least recently used
// one; not safe for concurrent use.
type lru[K comparable, V any] struct {
	max     int
	ll      *list.List // of *entry[K, V], most recent first
	m       map[K]*list.Element
	onEvict func(K, V)
}

type entry[K comparable, V any] struct {
	k K
	v V
}

func newLRU[K comparable, V any](max int, onEvict func(K, V)) *lru[K, V] {
	return &lru[K, V]{max: max, ll: list.New(), m: make(map[K]*list.Element), onEvict: onEvict}
}

// get returns k's value and marks it used.
func (l *lru[K, V]) get(k K) (V, bool) {
	e, ok := l.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	l.ll.MoveToFront(e)
	return e.Value.(*entry[K, V]).v, true
}

// peek returns k's value without marking it used.
func (l *lru[K, V]) peek(k K) (V, bool) {
	e, ok := l.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	return e.Value.(*entry[K, V]).v, true
}

// put sets k's value, evicting the least recently used entry when full.
func (l *lru[K, V]) put(k K, v V) {
	if e, ok := l.m[k]; ok {
		old := e.Value.(*entry[K, V])
		if l.onEvict != nil {
			l.onEvict(k, old.v)
		}
		old.v = v
		l.ll.MoveToFront(e)
		return
	}
	if l.ll.Len() >= l.max {
		last := l.ll.Back()
		old := last.Value.(*entry[K, V])
		l.ll.Remove(last)
		delete(l.m, old.k)
		if l.onEvict != nil {
			l.onEvict(old.k, old.v)
		}
	}
	l.m[k] = l.ll.PushFront(&entry[K, V]{k: k, v: v})
}

// len returns the number of entries.
func (l *lru[K, V]) len() int { return l.ll.Len() }

// values returns every value.
func (l *lru[K, V]) values() []V {
	out := make([]V, 0, l.ll.Len())
	for e := l.ll.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*entry[K, V]).v)
	}
	return out
}
