package main

import (
	"flag"
	"time"

	"github.com/quiot/quiot/broker/node"
)

// `quiot broker --cluster nats://h:4222,...`: brokers share one topic space,
// its retained messages and history through a NATS cluster with JetStream
// (broker/cluster, docs/cluster.md). The flags are the same in every build
// (a shared config file stays valid); the 32-bit ARM (Pi edge) build has no
// cluster link and refuses --cluster (broker/node) unless built with -tags
// quiot_cluster.

type clusterFlags struct {
	urls, name                                  string
	user, password, token, nkey, creds          string
	ca, cert, key                               string
	prefix                                      string
	replicas, holdMessages                      int
	holdBytes, receiveBytes                     int64
	ackTimeout, reconnectWait, maxReconnectWait time.Duration
	localNumbering                              bool
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.urls, "cluster", "", "join a broker cluster through these NATS servers (nats://h:4222,... or tls://...); empty = this broker alone (docs/cluster.md)")
	fs.StringVar(&f.name, "cluster-name", "", "this broker's name in the cluster (empty = the host name)")
	fs.StringVar(&f.user, "cluster-user", "", "NATS user name (with --cluster-password)")
	fs.StringVar(&f.password, "cluster-password", "", "NATS password")
	fs.StringVar(&f.token, "cluster-token", "", "NATS token")
	fs.StringVar(&f.nkey, "cluster-nkey", "", "NATS nkey seed file")
	fs.StringVar(&f.creds, "cluster-creds", "", "NATS credentials file (.creds: JWT and nkey seed)")
	fs.StringVar(&f.ca, "cluster-ca", "", "CA certificate file that verifies the NATS servers (TLS)")
	fs.StringVar(&f.cert, "cluster-cert", "", "client certificate file for NATS (mTLS, with --cluster-key)")
	fs.StringVar(&f.key, "cluster-key", "", "client key file for NATS")
	fs.StringVar(&f.prefix, "cluster-prefix", "", "first token of the cluster's NATS subjects, stream and bucket (empty = quiot)")
	fs.IntVar(&f.replicas, "cluster-replicas", 0, "JetStream replicas of the history stream and retained bucket when this broker creates them (0 = 3; 1 for a single NATS server)")
	fs.IntVar(&f.holdMessages, "cluster-hold-messages", 0, "messages held for the cluster while NATS is unreachable; beyond it the oldest are dropped and the gap announced (0 = 10000)")
	fs.Int64Var(&f.holdBytes, "cluster-hold-bytes", 0, "bytes held for the cluster while NATS is unreachable (0 = 16MiB)")
	fs.Int64Var(&f.receiveBytes, "cluster-receive-bytes", 0, "bytes of messages from the cluster waiting for this broker (--cluster-local-numbering); beyond it they are dropped and counted (0 = 64MiB)")
	fs.DurationVar(&f.ackTimeout, "cluster-ack-timeout", 0, "wait for JetStream's acknowledgement before sending again (0 = 5s)")
	fs.DurationVar(&f.reconnectWait, "cluster-reconnect-wait", 0, "first delay between NATS reconnection attempts, doubling with jitter (0 = 250ms)")
	fs.DurationVar(&f.maxReconnectWait, "cluster-max-reconnect-wait", 0, "longest delay between NATS reconnection attempts (0 = 10s)")
	fs.BoolVar(&f.localNumbering, "cluster-local-numbering", false, "number messages per broker (local delivery goes on while NATS is unreachable) instead of the cluster-wide sequence numbers that let a subscriber resume on any broker with no gap (docs/cluster.md)")
}

// config maps the flags to the node's cluster configuration (checked by
// broker/node).
func (f *clusterFlags) config() node.Cluster {
	return node.Cluster{
		URLs: f.urls, Name: f.name,
		User: f.user, Password: f.password, Token: f.token, NKeySeedFile: f.nkey, CredsFile: f.creds,
		CAFile: f.ca, CertFile: f.cert, KeyFile: f.key,
		Prefix: f.prefix, Replicas: f.replicas,
		HoldMessages: f.holdMessages, HoldBytes: f.holdBytes, ReceiveBytes: f.receiveBytes,
		AckTimeout: f.ackTimeout, ReconnectWait: f.reconnectWait, MaxReconnectWait: f.maxReconnectWait,
		LocalNumbering: f.localNumbering,
	}
}
