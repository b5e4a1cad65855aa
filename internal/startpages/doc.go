// Package startpages lets a long-running small role (quiot pub, quiot sub)
// give back the pages of its own binary that only start-up touched.
//
// Why: every package linked into the one quiot binary runs its init in
// every process, whatever the role, and the kernel maps up to 64 KiB
// around each page fault on a file (fault-around), so after start-up a
// publisher has most of the binary's code and read-only data mapped: about
// 13 of its 16.5 MB RSS on amd64 (docs/BENCH.md, "Publisher memory"). Most
// of those pages belong to inits and to connection set-up (certificate
// parsing, the TLS handshake) and are never read again. Release drops the
// process's mappings of the binary's read-only segments (code, read-only
// data, the pc tables) with madvise(MADV_DONTNEED); the pages stay in the
// page cache, clean and shared with any other quiot process, and the ones
// the role still uses come back at their next access as minor faults (no
// disk read while the file is cached). Writable segments (.data, .bss) are
// never touched: dropping a written private page would lose its contents.
package startpages
