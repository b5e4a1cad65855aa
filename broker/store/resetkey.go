package store

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/safefile"
)

// ResetKeyFileName is the file of the QUIC stateless reset key inside the
// data directory.
const ResetKeyFileName = "quic-reset.key"

// ResetKey returns the QUIC stateless reset key kept in dir, making one the
// first time. With the same key across restarts, a restarted broker
// answers a packet of a connection of its previous run with a stateless
// reset the client can verify, so the client reconnects at once instead of
// waiting for its idle timeout (30 s by default, 90 s with the lean
// profile). Every QUIC listener of the broker may share it.
func ResetKey(dir string) (*quic.StatelessResetKey, error) {
	var key quic.StatelessResetKey
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("couldn't create data directory: %w", err)
	}
	if err := safefile.CheckDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, ResetKeyFileName)
	b, err := readInDir(path)
	switch {
	case errors.Is(err, safefile.ErrUnsafe):
		return nil, err
	case err == nil && len(b) == len(key):
		copy(key[:], b)
		return &key, nil
	case err == nil:
		return nil, fmt.Errorf("%w: %s holds %d bytes, want %d", ErrCorrupt, path, len(b), len(key))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("couldn't read stateless reset key: %w", err)
	}
	_, _ = rand.Read(key[:]) // never fails (Go >= 1.24)
	tmp, err := os.CreateTemp(dir, ResetKeyFileName+".*")
	if err != nil {
		return nil, fmt.Errorf("couldn't write stateless reset key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(key[:]); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return nil, fmt.Errorf("couldn't write stateless reset key: %w", err)
	}
	return &key, nil
}

// readInDir reads a file of the data directory without following a
// symbolic link (safefile.OpenInDir).
func readInDir(path string) ([]byte, error) {
	f, err := safefile.OpenInDir(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
