// Package gen generates probe traffic: UDP datagrams whose payload starts
// with a [Header] (magic, sequence, flow id, send time) and is padded to a set
// Ethernet frame size, sent at a constant or Poisson rate, in bursts of k
// back-to-back packets, over N distinct flows (N sockets with distinct
// source ports, so N distinct 5-tuples), from any network namespace.
package gen
