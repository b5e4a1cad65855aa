package auth

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoFile is returned by Reload when the authenticator was not loaded
// from a file.
var ErrNoFile = errors.New("no ACL file to reload (the broker runs without --auth)")

// Reload re-reads the file Load read and swaps the rules in place. On an
// error the old rules stay. Callers learn of the change through Changed
// and check their connections with StillValid.
func (a *Authenticator) Reload() error {
	if a.modeOf() != modeACL || a.path == "" {
		return ErrNoFile
	}
	f, err := readFile(a.path)
	if err != nil {
		return err
	}
	if err := a.Replace(f); err != nil {
		return fmt.Errorf("auth file %s: %w", a.path, err)
	}
	return nil
}

// Refresh rebuilds the current rules as they are (without reading the
// file): credentials that expired since the last load count as removed,
// so StillValid closes the connections that may have used them. Call it
// at NextExpiry.
func (a *Authenticator) Refresh() error {
	if a.modeOf() != modeACL {
		return nil
	}
	return a.Replace(a.state().file)
}

// Replace swaps the rules for those of f (the checks of New apply).
func (a *Authenticator) Replace(f File) error {
	if a.modeOf() != modeACL {
		return errors.New("not an ACL authenticator")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	next, err := build(f, a.clock())
	if err != nil {
		return err
	}
	prev := a.state()
	next.gen = prev.gen + 1
	restrict(prev, next)
	a.verify.forget()
	a.st.Store(next)
	close(a.changed)
	a.changed = make(chan struct{})
	return nil
}

// Generation counts the reloads: 0 for the rules loaded first. Record it
// before authenticating a connection and pass it to StillValid.
func (a *Authenticator) Generation() uint64 {
	if a.modeOf() != modeACL {
		return 0
	}
	return a.state().gen
}

// Changed returns a channel that is closed at the next reload (Reload,
// Refresh, Replace). Take a new channel after each change. Without an ACL
// the channel is never closed.
func (a *Authenticator) Changed() <-chan struct{} {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// Watch returns the current generation and the channel that the next
// reload closes, read together (a reload between two separate calls of
// Generation and Changed would go unnoticed). A watcher loops:
//
//	gen, changed := a.Watch()
//	for {
//		<-changed
//		// close what !a.StillValid(id, gen) ...
//		gen, changed = a.Watch()
//	}
func (a *Authenticator) Watch() (gen uint64, changed <-chan struct{}) {
	if a == nil {
		return 0, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Generation(), a.changed
}

// StillValid reports whether a connection of identity id ("" anonymous)
// authenticated at generation since may stay connected under the current
// rules. It is false when, in a reload after since, the identity lost a
// publish or subscribe pattern or a credential (removed or expired), its
// [[user]] was removed or added (an identity without one has no rights),
// or, for anonymous clients, [anonymous] lost a pattern or was removed. Connections whose rights only grew or stayed stay up. Without
// an ACL it is always true.
func (a *Authenticator) StillValid(id string, since uint64) bool {
	if a.modeOf() != modeACL {
		return true
	}
	st := a.state()
	if since >= st.gen {
		return true
	}
	if id != "" && ValidIdentity(id) != nil {
		return false
	}
	if g, ok := st.restricted[id]; ok && g > since {
		return false
	}
	if id != "" {
		// An identity without a [[user]] entry has no rights (rules).
		return st.users[id] != nil
	}
	return st.restricted[""] <= since
}

// NextExpiry returns the earliest expiry of a credential still valid now,
// or the zero time when none expires.
func (a *Authenticator) NextExpiry() time.Time {
	if a.modeOf() != modeACL {
		return time.Time{}
	}
	now := a.clock()
	var next time.Time
	for _, u := range a.state().users {
		for _, list := range [][]*credential{u.tokens, u.passwords} {
			for _, c := range list {
				if !c.expires.IsZero() && c.expires.After(now) && (next.IsZero() || c.expires.Before(next)) {
					next = c.expires
				}
			}
		}
	}
	return next
}
