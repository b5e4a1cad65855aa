package client

import "context"

type subscribedKey struct{}

// WithSubscribed returns a context that makes Subscribe call fn each time
// the broker has accepted the subscription (the first time and after every
// resubscription), before any message of it is delivered. Callers use it to
// start publishing only once a subscriber is live, without sleeps.
func WithSubscribed(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, subscribedKey{}, fn)
}

// notifySubscribed calls the function WithSubscribed put in ctx, if any.
func notifySubscribed(ctx context.Context) {
	if fn, ok := ctx.Value(subscribedKey{}).(func()); ok && fn != nil {
		fn()
	}
}
