package gen

import "net/netip"

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
