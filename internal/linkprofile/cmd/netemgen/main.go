// Command netemgen turns the link profiles (internal/linkprofile's
// profiles.toml, or -profiles FILE) into tc netem commands for a real
// testbed.
//
//	go run ./internal/linkprofile/cmd/netemgen -profile nbiot -dev eth0 [-peer 192.0.2.10]
//	go run ./internal/linkprofile/cmd/netemgen -clear -dev eth0
//	go run ./internal/linkprofile/cmd/netemgen -script -o scripts/netem/netem.sh
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/quiot/quiot/internal/linkprofile"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "netemgen:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("netemgen", flag.ContinueOnError)
	var (
		file    = fs.String("profiles", "", "profiles file (default: the built-in profiles.toml)")
		profile = fs.String("profile", "", "profile to apply")
		dev     = fs.String("dev", "", "the device's network interface (egress = up direction)")
		ifb     = fs.String("ifb", "ifb0", "IFB device for the ingress (down) direction")
		peer    = fs.String("peer", "", "broker IPv4 address: shape only traffic to and from it")
		clear   = fs.Bool("clear", false, "print the commands that remove the shaping")
		script  = fs.Bool("script", false, "print the standalone shell script for every profile")
		list    = fs.Bool("list", false, "list the profiles")
		out     = fs.String("o", "", "write to this file instead of stdout")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	set, source := linkprofile.Default(), "internal/linkprofile/profiles.toml"
	if *file != "" {
		var err error
		if set, err = linkprofile.LoadFile(*file); err != nil {
			return err
		}
		source = *file
	}
	target := linkprofile.NetemTarget{Dev: *dev, IFB: *ifb, Peer: *peer}
	var text string
	switch {
	case *script:
		text = linkprofile.Script(set, source)
	case *list:
		var b strings.Builder
		for _, p := range set.All() {
			fmt.Fprintf(&b, "%-6s %s (RTT %s)\n", p.Name, p.Description, linkprofile.FormatMs(p.RTT()))
		}
		text = b.String()
	case *clear:
		if *dev == "" {
			return fmt.Errorf("-clear needs -dev")
		}
		text = strings.Join(linkprofile.ClearCommands(target), "\n") + "\n"
	default:
		if *profile == "" || *dev == "" {
			return fmt.Errorf("need -profile and -dev (or -clear, -script, -list)")
		}
		p, err := set.Get(*profile)
		if err != nil {
			return err
		}
		cmds := append(linkprofile.ClearCommands(target), linkprofile.ApplyCommands(p, target)...)
		text = "# " + p.Name + ": " + p.Description + "\n" + strings.Join(cmds, "\n") + "\n"
	}
	if *out != "" {
		mode := os.FileMode(0o644)
		if *script {
			mode = 0o755
		}
		if err := os.WriteFile(*out, []byte(text), mode); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
		return nil
	}
	_, err := io.WriteString(stdout, text)
	return err
}
