//go:build !arm || quiot_cluster

package node

import (
	"log/slog"

	"github.com/quiot/quiot/broker/cluster"
)

// newLink makes the cluster link of c (nil without URLs); it does not
// connect yet.
func newLink(c Cluster, log *slog.Logger) (clusterLink, error) {
	if c.URLs == "" {
		return nil, nil
	}
	l, err := cluster.New(cluster.Options{
		URLs: c.URLs, Name: c.Name,
		User: c.User, Password: c.Password, Token: c.Token, NKeySeedFile: c.NKeySeedFile, CredsFile: c.CredsFile,
		CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile,
		Prefix: c.Prefix, Replicas: c.Replicas,
		HoldMessages: c.HoldMessages, HoldBytes: c.HoldBytes, ReceiveBytes: int(c.ReceiveBytes),
		AckTimeout: c.AckTimeout, ReconnectWait: c.ReconnectWait, MaxReconnectWait: c.MaxReconnectWait,
		LocalNumbering: c.LocalNumbering,
		Logger:         log,
	})
	if err != nil {
		return nil, &FieldError{Field: "Cluster", Err: err}
	}
	return l, nil
}
