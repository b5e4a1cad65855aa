package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quiot/quiot/internal/certs"
)

func init() {
	register(command{
		name:    "certs",
		summary: "make an ECDSA P-256 CA (certs ca) or a device certificate (certs device NAME)",
		run:     runCerts,
	})
}

const certsUsage = `usage:
  quiot certs ca [--out DIR] [--cn NAME] [--days N]
      writes DIR/ca.pem and DIR/ca-key.pem
  quiot certs device NAME [--ca-dir DIR] [--out DIR] [--hosts h1,h2] [--days N]
      writes DIR/NAME.pem and DIR/NAME-key.pem, signed by DIR/ca.pem; the
      certificate serves as broker (server) and client (mTLS, identity NAME).
      NAME must be one topic level: not empty, no '+', '#', '/', control
      characters, no leading '$', at most 128 bytes`

func runCerts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, certsUsage)
		return fmt.Errorf("%w: certs needs ca or device", errUsage)
	}
	switch args[0] {
	case "ca":
		return runCertsCA(args[1:], stdout, stderr)
	case "device":
		return runCertsDevice(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, certsUsage)
		return nil
	}
	fmt.Fprintln(stderr, certsUsage)
	return fmt.Errorf("%w: unknown certs command %q", errUsage, args[0])
}

func validity(days int) (*certs.Options, error) {
	if days < 0 {
		return nil, fmt.Errorf("%w: --days must not be negative", errUsage)
	}
	return &certs.Options{Validity: time.Duration(days) * 24 * time.Hour}, nil
}

func runCertsCA(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certs ca", stderr)
	out := fs.String("out", ".", "directory to write ca.pem and ca-key.pem to")
	cn := fs.String("cn", "quiot CA", "common name of the CA")
	days := fs.Int("days", 0, "validity in days (0 = 10 years)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts, err := validity(*days)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("couldn't make output directory: %w", err)
	}
	ca, err := certs.NewCA(*cn, opts)
	if err != nil {
		return err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	cf, kf := filepath.Join(*out, "ca.pem"), filepath.Join(*out, "ca-key.pem")
	if err := certs.WriteFiles(cf, ca.CertPEM(), kf, key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s (SHA-256 %s)\n", cf, kf, certs.Fingerprint(ca.Cert.Raw))
	return nil
}

func runCertsDevice(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stdout, certsUsage)
			return nil
		}
		fmt.Fprintln(stderr, certsUsage)
		return fmt.Errorf("%w: certs device needs a NAME before the flags", errUsage)
	}
	name := args[0]
	// The name becomes the identity that ACL patterns substitute for %u:
	// refuse names with wildcards, separators or control characters
	// before anything is written.
	if err := certs.ValidateName(name); err != nil {
		return fmt.Errorf("%w: certs device: %v", errUsage, err)
	}
	fs := newFlagSet("certs device", stderr)
	caDir := fs.String("ca-dir", ".", "directory holding ca.pem and ca-key.pem")
	out := fs.String("out", "", "directory to write NAME.pem and NAME-key.pem to (empty = --ca-dir)")
	hosts := fs.String("hosts", "", "comma-separated DNS names and IPs for the SAN (empty = NAME, localhost, 127.0.0.1, ::1)")
	days := fs.Int("days", 0, "validity in days (0 = 2 years)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	opts, err := validity(*days)
	if err != nil {
		return err
	}
	if *hosts != "" {
		opts.Hosts = strings.Split(*hosts, ",")
	}
	if *out == "" {
		*out = *caDir
	}
	ca, err := certs.LoadCA(filepath.Join(*caDir, "ca.pem"), filepath.Join(*caDir, "ca-key.pem"))
	if err != nil {
		return err
	}
	dev, err := ca.Issue(name, opts)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("couldn't make output directory: %w", err)
	}
	cf, kf := filepath.Join(*out, name+".pem"), filepath.Join(*out, name+"-key.pem")
	if err := certs.WriteFiles(cf, dev.CertPEM, kf, dev.KeyPEM); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s for %q (SHA-256 %s)\n", cf, kf, name, certs.Fingerprint(dev.TLS.Certificate[0]))
	return nil
}
