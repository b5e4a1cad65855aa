//go:build !linux

package capture

import "context"

// Handle is an open capture (unsupported on this system).
type Handle struct{}

// Open fails with ErrUnsupported.
func Open(o Options) (*Handle, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrUnsupported
}

// Interface returns "".
func (h *Handle) Interface() string { return "" }

// Run fails with ErrUnsupported.
func (h *Handle) Run(ctx context.Context, fn func(*Packet)) error { return ErrUnsupported }

// Stats returns zero counters.
func (h *Handle) Stats() (Stats, error) { return Stats{}, ErrUnsupported }

// Close does nothing.
func (h *Handle) Close() error { return nil }
