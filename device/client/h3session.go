package client

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// fileSessionCache is a tls.ClientSessionCache that also keeps its sessions
// in a file, so a publisher that runs as a new process for every wake-up
// (cron, a PSM device's boot) resumes the TLS session of its previous run:
// a shorter handshake (no certificate on the wire) and, with allow_0rtt, the
// first publish in the first flight. quic-go's transport parameters for 0-RTT
// travel in the session state's Extra field, which SessionState.Bytes keeps.
// The QUIC address-validation token (and the RTT it carries) cannot be kept
// this way: quic.ClientToken's fields are unexported.
type fileSessionCache struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	mem     tls.ClientSessionCache
	entries map[string]sessionEntry
}

// sessionEntry is one session in the file.
type sessionEntry struct {
	Ticket []byte `json:"ticket"`
	State  []byte `json:"state"`
}

// maxFileSessions bounds the sessions kept in the file (one per broker name).
const maxFileSessions = 8

// NewFileSessionCache returns a TLS session cache kept in path (created
// with mode 0600 on the first session; it holds resumption secrets, so it
// belongs in the device's private state directory). A missing or unreadable
// file starts an empty cache (logged at debug level): a full handshake is
// the fallback, never an error.
func NewFileSessionCache(path string, log *slog.Logger) tls.ClientSessionCache {
	if log == nil {
		log = slog.Default()
	}
	c := &fileSessionCache{path: path, log: log, mem: tls.NewLRUClientSessionCache(maxFileSessions), entries: map[string]sessionEntry{}}
	b, err := os.ReadFile(path)
	if err != nil {
		if !os.IsNotExist(err) {
			log.Debug("session cache file not read", "file", path, "error", err)
		}
		return c
	}
	if err := json.Unmarshal(b, &c.entries); err != nil {
		log.Debug("session cache file ignored", "file", path, "error", err)
		c.entries = map[string]sessionEntry{}
		return c
	}
	for k, e := range c.entries {
		st, err := tls.ParseSessionState(e.State)
		if err != nil {
			log.Debug("session cache entry ignored", "key", k, "error", err)
			delete(c.entries, k)
			continue
		}
		cs, err := tls.NewResumptionState(e.Ticket, st)
		if err != nil {
			delete(c.entries, k)
			continue
		}
		c.mem.Put(k, cs)
	}
	return c
}

// Get implements tls.ClientSessionCache.
func (c *fileSessionCache) Get(key string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mem.Get(key)
}

// Put implements tls.ClientSessionCache; a nil cs forgets key.
func (c *fileSessionCache) Put(key string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mem.Put(key, cs)
	if cs == nil {
		delete(c.entries, key)
	} else {
		ticket, st, err := cs.ResumptionState()
		if err != nil || st == nil {
			return
		}
		b, err := st.Bytes()
		if err != nil {
			return
		}
		if _, ok := c.entries[key]; !ok && len(c.entries) >= maxFileSessions {
			for k := range c.entries { // any other broker's session makes room
				delete(c.entries, k)
				break
			}
		}
		c.entries[key] = sessionEntry{Ticket: ticket, State: b}
	}
	if err := c.saveLocked(); err != nil {
		c.log.Debug("session cache file not written", "file", c.path, "error", err)
	}
}

// saveLocked writes the entries to the file atomically (temporary file and
// rename).
func (c *fileSessionCache) saveLocked() error {
	b, err := json.Marshal(c.entries)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".session-*")
	if err != nil {
		return fmt.Errorf("couldn't write session cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("couldn't write session cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("couldn't write session cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("couldn't write session cache: %w", err)
	}
	return nil
}
