package quictune

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// KeyLogEnv is the environment variable naming the TLS key log file, as
// curl, Firefox and Chromium read it. When it is set, every TLS
// configuration this package applies (broker, MQTT over QUIC, pub, sub)
// writes its session secrets there in the NSS key log format, so that
// Wireshark can decrypt the captured QUIC (and TLS over TCP) traffic.
const KeyLogEnv = "SSLKEYLOGFILE"

// keyLog is the process's key log file, opened once on first use.
type keyLog struct {
	once sync.Once
	w    io.Writer
}

var (
	keyLogState = &keyLog{}
	// keyLogWarnTo receives the warning; tests replace it.
	keyLogWarnTo io.Writer = os.Stderr
)

// KeyLogWriter returns the writer of the file named by $SSLKEYLOGFILE, or
// nil when the variable is unset or empty. The first call opens the file
// (append, mode 0600) and prints a loud warning to stderr: whoever reads
// that file can decrypt every connection of this process. A file that
// cannot be opened is reported there too, and nothing is logged.
func KeyLogWriter() io.Writer {
	s := keyLogState
	s.once.Do(func() {
		path := os.Getenv(KeyLogEnv)
		if path == "" {
			return
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(keyLogWarnTo, "WARNING: %s=%s is set but the file cannot be opened (%v): TLS secrets are NOT logged\n", KeyLogEnv, path, err)
			return
		}
		fmt.Fprintf(keyLogWarnTo, "\n"+
			"!!! WARNING: %s=%s is set: the TLS session secrets of every connection of\n"+
			"!!! this process are written to that file. Anyone who has it can decrypt the\n"+
			"!!! captured traffic (Wireshark: TLS protocol preferences, (Pre)-Master-Secret\n"+
			"!!! log filename). For debugging only: unset it in production.\n\n", KeyLogEnv, path)
		s.w = f
	})
	return s.w
}
