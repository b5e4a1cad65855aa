package node

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
)

// startReload runs the reloads: Config.Reload's signals reload the ACL
// file and the bridge tables, and a credential's expiry refreshes the ACL
// (connections that may have used it are closed).
func (n *Node) startReload(ctx context.Context) error {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		n.reloader(ctx, n.c.Reload, done)
	}()
	n.stops = append(n.stops, func(context.Context) error {
		close(done)
		<-stopped
		return nil
	})
	return nil
}

// reloader reloads on each value from hup and refreshes the ACL when a
// credential expires, until done is closed or ctx ends.
func (n *Node) reloader(ctx context.Context, hup <-chan os.Signal, done <-chan struct{}) {
	a := n.c.Auth
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	arm := func() {
		expiry.Stop()
		if next := a.NextExpiry(); !next.IsZero() {
			expiry.Reset(time.Until(next))
		}
	}
	arm()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-hup:
			if n.reloadACL() {
				arm()
			}
			n.reloadBridges(ctx)
		case <-expiry.C:
			if err := a.Refresh(); err != nil {
				n.log.Error("ACL refresh at a credential's expiry failed", "err", err)
			} else {
				n.log.Info("a credential expired: connections that may have used it are closed", "generation", a.Generation())
			}
			arm()
		}
	}
}

// reloadACL reads the ACL file again; it reports whether the rules changed.
func (n *Node) reloadACL() bool {
	a := n.c.Auth
	err := a.Reload()
	switch {
	case errors.Is(err, auth.ErrNoFile):
		n.log.Info("SIGHUP: no ACL file to reload (no --auth)")
		return false
	case err != nil:
		n.log.Error("ACL reload failed: the previous rules stay", "err", err)
		return false
	}
	n.log.Info("ACL reloaded", "generation", a.Generation())
	for _, w := range a.Warnings() {
		n.log.Warn("ACL: " + w)
	}
	return true
}

// startBridges runs Config.Bridges (each connects in the background).
func (n *Node) startBridges(ctx context.Context) error {
	if len(n.c.Bridges) == 0 && n.c.BridgeFile == "" {
		return nil
	}
	mgr := bridge.NewManager(n.b, n.log)
	if err := mgr.Reload(ctx, n.c.Bridges); err != nil {
		_ = mgr.Close(context.Background())
		return err
	}
	n.bridges = mgr
	n.stops = append(n.stops, mgr.Close)
	return nil
}

// reloadBridges applies BridgeFile's [[bridge]] tables as they are now; a
// file with an error changes nothing.
func (n *Node) reloadBridges(ctx context.Context) {
	path := n.c.BridgeFile
	if path == "" || n.bridges == nil {
		return
	}
	cfgs, err := bridge.LoadFile(path)
	for _, c := range cfgs {
		if err == nil {
			err = bridge.CheckAuth(c, n.c.Auth)
		}
	}
	if err != nil {
		n.log.Error("SIGHUP: bridge tables not reloaded: the running bridges stay", "config", path, "err", err)
		return
	}
	if err := n.bridges.Reload(ctx, cfgs); err != nil {
		n.log.Error("SIGHUP: bridges reloaded with errors", "err", err)
		return
	}
	n.log.Info("SIGHUP: bridges reloaded", "config", path, "bridges", len(cfgs))
}
