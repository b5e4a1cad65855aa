//go:build linux

package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dir is where `ip netns` binds named namespaces.
const Dir = "/run/netns"

// Mount returns the bind-mount path of the named namespace.
func Mount(name string) string { return filepath.Join(Dir, name) }

// Do runs fn with the calling goroutine's OS thread switched into the named
// network namespace, then switches back. An empty name runs fn in the current
// namespace. fn must not start goroutines that expect to be in the namespace
// (they are not); sockets it creates stay bound to the namespace.
func Do(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	target, err := unix.Open(Mount(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("network namespace %q does not exist (no %s): %w", name, Mount(name), err)
		}
		return fmt.Errorf("open network namespace %q: %w", name, err)
	}
	defer unix.Close(target)

	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current network namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("enter network namespace %q: %w (needs root / CAP_SYS_ADMIN)", name, err)
		}
		return fmt.Errorf("enter network namespace %q: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime terminates it when this
		// goroutine exits, so no other goroutine runs in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("restore network namespace after %q: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Exists reports whether the named namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(Mount(name))
	return err == nil
}
