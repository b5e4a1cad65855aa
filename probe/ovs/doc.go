// Package ovs drives Open vSwitch through its own command-line tools
// (ovs-vsctl, ovs-ofctl, ovs-appctl): version, datapath type, datapath
// hit/missed/lost and flow counts, PMD statistics of the userspace datapath,
// OpenFlow rules installed in bulk, other_config settings. It places
// ovs-vswitchd in a memory- and CPU-limited cgroup (v1 or v2), samples its
// CPU time and resident memory from procfs, and builds a throwaway Testbed:
// a private ovsdb-server and ovs-vswitchd (--disable-system, netdev datapath)
// in a temporary directory, wired to network namespaces through veth pairs,
// that is always torn down. Cleanup removes the leftovers of an earlier run
// that was killed.
//
// Output parsers are pure functions over the tools' text, tested on fixtures
// under testdata/.
package ovs
