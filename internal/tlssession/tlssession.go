// Package tlssession keeps TLS client sessions (resumption tickets) in a
// file, with the round-trip time of the last connection to each server:
// a client that runs as a new process (a device's publisher woken by
// cron or after PSM, a broker restarted, a bridge killed) resumes the
// session of its previous run.
package tlssession

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// fileCache is a tls.ClientSessionCache that also keeps its sessions
// in a file, so a publisher that runs as a new process for every wake-up
// (cron, a PSM device's boot) resumes the TLS session of its previous run:
// a shorter handshake (no certificate on the wire) and, with allow_0rtt, the
// first publish in the first flight. quic-go's transport parameters for 0-RTT
// travel in the session state's Extra field, which SessionState.Bytes keeps.
// The QUIC address-validation token cannot be kept this way
// (quic.ClientToken's fields are unexported), so the RTT it carries is kept
// beside the sessions instead: the smoothed RTT of the last connection to
// each broker (RTTMemory), which sets the next run's handshake probe hold
// (quictune's handshake_rtt_from_session, on in lean).
type fileCache struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	mem     tls.ClientSessionCache
	entries map[string]sessionEntry
	rtts    map[string]float64 // broker host:port -> RTT in ms
}

// sessionFile is the file's format. Files written before it held the
// sessions map alone, and still load.
type sessionFile struct {
	Sessions map[string]sessionEntry `json:"sessions"`
	// RTTMs is the smoothed RTT of the last connection to each broker
	// (host:port), in milliseconds.
	RTTMs map[string]float64 `json:"rtt_ms,omitempty"`
}

// RTTMemory is implemented by session caches that also keep the RTT of
// the last connection to each broker (NewFile): an HTTP/3
// client records its connection's smoothed RTT there when it closes, and
// the next client of the same broker starts its handshake probe hold from
// it when its profile has handshake_rtt_from_session (device/client,
// broker/bridge).
type RTTMemory interface {
	// LastRTT returns the RTT recorded for broker (host:port); 0 if none.
	LastRTT(broker string) time.Duration
	// SetLastRTT records rtt for broker.
	SetLastRTT(broker string, rtt time.Duration)
}

// sessionEntry is one session in the file.
type sessionEntry struct {
	Ticket []byte `json:"ticket"`
	State  []byte `json:"state"`
}

// maxFileSessions bounds the sessions kept in the file (one per broker name).
const maxFileSessions = 8

// NewFile returns a TLS session cache kept in path (created
// with mode 0600 on the first session; it holds resumption secrets, so it
// belongs in the device's private state directory). A missing or unreadable
// file starts an empty cache (logged at debug level): a full handshake is
// the fallback, never an error.
func NewFile(path string, log *slog.Logger) tls.ClientSessionCache {
	if log == nil {
		log = slog.Default()
	}
	c := &fileCache{path: path, log: log, mem: tls.NewLRUClientSessionCache(maxFileSessions), entries: map[string]sessionEntry{}, rtts: map[string]float64{}}
	b, err := os.ReadFile(path)
	if err != nil {
		if !os.IsNotExist(err) {
			log.Debug("session cache file not read", "file", path, "error", err)
		}
		return c
	}
	var f sessionFile
	err = json.Unmarshal(b, &f)
	if err == nil && f.Sessions == nil && f.RTTMs == nil {
		err = json.Unmarshal(b, &f.Sessions) // the earlier format
	}
	if err != nil {
		log.Debug("session cache file ignored", "file", path, "error", err)
		return c
	}
	if f.Sessions != nil {
		c.entries = f.Sessions
	}
	for k, v := range f.RTTMs {
		if v > 0 && len(c.rtts) < maxFileSessions {
			c.rtts[k] = v
		}
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
func (c *fileCache) Get(key string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mem.Get(key)
}

// Put implements tls.ClientSessionCache; a nil cs forgets key.
func (c *fileCache) Put(key string, cs *tls.ClientSessionState) {
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

// LastRTT implements RTTMemory.
func (c *fileCache) LastRTT(broker string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(c.rtts[broker] * float64(time.Millisecond))
}

// SetLastRTT implements RTTMemory; it writes the file when the RTT
// changes. A zero or negative rtt is ignored.
func (c *fileCache) SetLastRTT(broker string, rtt time.Duration) {
	if rtt <= 0 {
		return
	}
	ms := float64(rtt) / float64(time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rtts[broker] == ms {
		return
	}
	if _, ok := c.rtts[broker]; !ok && len(c.rtts) >= maxFileSessions {
		for k := range c.rtts { // any other broker's RTT makes room
			delete(c.rtts, k)
			break
		}
	}
	c.rtts[broker] = ms
	if err := c.saveLocked(); err != nil {
		c.log.Debug("session cache file not written", "file", c.path, "error", err)
	}
}

// saveLocked writes the entries to the file atomically (temporary file and
// rename).
func (c *fileCache) saveLocked() error {
	b, err := json.Marshal(sessionFile{Sessions: c.entries, RTTMs: c.rtts})
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
