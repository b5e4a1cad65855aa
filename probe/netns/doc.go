// Package netns runs code inside a named Linux network namespace (one created
// with `ip netns add NAME`, bound under /run/netns) and builds small throwaway
// topologies (namespaces, veth pairs, Linux bridges) through iproute2 for
// tests and for the probe floor.
//
// A socket created inside [Do]'s function stays in that namespace after Do
// returns to the caller's namespace, so a generator or capture can create its
// socket in a namespace and then use it from any goroutine.
package netns
