//go:build !linux

package netns

import "errors"

// ErrUnsupported is returned on systems without Linux network namespaces.
var ErrUnsupported = errors.New("network namespaces need Linux")

// Dir is where `ip netns` binds named namespaces.
const Dir = "/run/netns"

// Mount returns the bind-mount path of the named namespace.
func Mount(name string) string { return Dir + "/" + name }

// Do runs fn in the current namespace when name is empty; otherwise it fails.
func Do(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	return ErrUnsupported
}

// Exists reports false: there are no named namespaces here.
func Exists(name string) bool { return false }
