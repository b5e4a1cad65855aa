// Package srcvalid decides when a QUIC server asks new connections to
// prove their source address first (RFC 9000 section 8.1.2, a Retry
// packet; quic-go's Transport.VerifySourceAddress).
//
// A QUIC Initial packet can carry any source address: until the
// handshake completes, the server does not know that the client really
// is there. The broker charges connection attempts to their address
// (per-address limits) when the first packet arrives, so spoofed packets
// could use up another address's share, and each holds handshake state
// until it times out. A Retry costs a legitimate client one round trip;
// a spoofer, who never receives it, cannot go on. So the Validator counts
// the handshakes in progress from addresses not yet validated, and once
// they reach its threshold every new attempt without a token gets a Retry
// (docs/security.md).
package srcvalid

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// DefaultThreshold is the number of unvalidated handshakes in progress
// from which new attempts get a Retry: half the default connections per
// address (broker.Limits.MaxConnsPerAddr, 128), so that spoofed attempts
// never hold more than half of one address's share for long.
const DefaultThreshold = 64

// Validator counts half-open handshakes and answers
// quic.Transport.VerifySourceAddress. The zero value is not usable; use
// New.
type Validator struct {
	threshold int64 // < 0: always Retry
	halfOpen  atomic.Int64
	retries   atomic.Uint64
}

// New returns a Validator that asks for a Retry once threshold handshakes
// from unvalidated addresses are in progress: zero means
// DefaultThreshold, a negative value a Retry for every new connection.
func New(threshold int) *Validator {
	if threshold == 0 {
		threshold = DefaultThreshold
	}
	return &Validator{threshold: int64(threshold)}
}

// VerifySourceAddress is quic.Transport.VerifySourceAddress: quic-go asks
// it for each new connection attempt without a valid token.
func (v *Validator) VerifySourceAddress(net.Addr) bool {
	if v.threshold < 0 || v.halfOpen.Load() >= v.threshold {
		v.retries.Add(1)
		return true
	}
	return false
}

type key struct{}

// handshake is one counted half-open connection.
type handshake struct {
	v    *Validator
	once sync.Once
}

func (h *handshake) done() { h.once.Do(func() { h.v.halfOpen.Add(-1) }) }

// Begin counts the connection attempt of ci as half-open when its address
// is not validated, until Established is called with the connection or
// ctx (quic.Transport.ConnContext's) ends. Call it from ConnContext once
// the attempt is admitted, and return the context it returns.
func (v *Validator) Begin(ctx context.Context, ci *quic.ClientInfo) context.Context {
	if ci.AddrVerified {
		return ctx
	}
	h := &handshake{v: v}
	v.halfOpen.Add(1)
	context.AfterFunc(ctx, h.done)
	return context.WithValue(ctx, key{}, h)
}

// Established ends the count of c's handshake once it completes (at
// once for a listener that returns connections after their handshake;
// an early listener's connections are watched until it completes).
func Established(c *quic.Conn) {
	h, ok := c.Context().Value(key{}).(*handshake)
	if !ok {
		return
	}
	select {
	case <-c.HandshakeComplete():
		h.done()
	default:
		go func() {
			select {
			case <-c.HandshakeComplete():
			case <-c.Context().Done():
			}
			h.done()
		}()
	}
}

// HalfOpen is the number of handshakes in progress from unvalidated
// addresses.
func (v *Validator) HalfOpen() int64 { return v.halfOpen.Load() }

// Retries counts the connection attempts asked to validate their address.
func (v *Validator) Retries() uint64 { return v.retries.Load() }
