package broker

import "net/http"

// HandlerForTest is the handler both listeners serve (tests and fuzz
// targets drive it without a network).
func HandlerForTest(b *Broker) http.Handler { return b.h3.Handler }
