package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Group is one heading of a command's flag list and the flags under it, in
// the order given.
type Group struct {
	// Title is the heading, e.g. "Listeners".
	Title string
	// Flags are flag names without dashes.
	Flags []string
}

// Example is one example at the end of a command's help.
type Example struct {
	// Comment says what the example does; printed as "# Comment".
	Comment string
	// Command is the command line.
	Command string
}

// Help lays out a command's -h text (see WriteUsage). The zero Help lists
// every flag under "Flags:".
type Help struct {
	// Synopsis follows "Usage: PROGRAM NAME"; empty means "[flags]".
	Synopsis string
	// Groups head the flag list. Flags in no group are listed after them
	// under "Other flags" (under "Flags" when there are no groups); names
	// that are not flags of the set are skipped, so a build that leaves a
	// flag out can share the layout.
	Groups []Group
	// Examples end the text.
	Examples []Example
}

// SetHelp makes h the layout of fs's -h text.
func SetHelp(fs *flag.FlagSet, h Help) {
	fs.Usage = func() { WriteUsage(fs.Output(), fs, h) }
}

// wrapWidth is the column the help text of a flag is wrapped at.
const wrapWidth = 80

// WriteUsage writes fs's help to w laid out by h: the synopsis, the flags
// under their group headings, each as "--name VALUE" and its help text with
// the default appended (see the package doc), then the examples.
func WriteUsage(w io.Writer, fs *flag.FlagSet, h Help) {
	syn := h.Synopsis
	if syn == "" {
		syn = "[flags]"
	}
	fmt.Fprintf(w, "Usage: %s %s\n", fs.Name(), syn)
	listed := map[string]bool{}
	for _, g := range h.Groups {
		var fl []*flag.Flag
		for _, n := range g.Flags {
			if f := fs.Lookup(n); f != nil && !listed[n] {
				listed[n] = true
				fl = append(fl, f)
			}
		}
		writeGroup(w, g.Title, fl)
	}
	var rest []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f)
		}
	})
	title := "Other flags"
	if len(h.Groups) == 0 {
		title = "Flags"
	}
	writeGroup(w, title, rest)
	if len(h.Examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for i, e := range h.Examples {
			if i > 0 {
				fmt.Fprintln(w)
			}
			if e.Comment != "" {
				fmt.Fprintf(w, "  # %s\n", e.Comment)
			}
			fmt.Fprintf(w, "  %s\n", e.Command)
		}
	}
}

func writeGroup(w io.Writer, title string, fl []*flag.Flag) {
	if len(fl) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, f := range fl {
		fmt.Fprintf(w, "  %s\n", flagLine(f))
		for _, l := range wrap(FlagHelp(f), wrapWidth-8) {
			fmt.Fprintf(w, "        %s\n", l)
		}
	}
}

// flagLine is "--name VALUE" (bool flags have no VALUE); a one-letter
// flag is written "-v", as mosquitto_sub's -v and -N are.
func flagLine(f *flag.Flag) string {
	name, _ := flag.UnquoteUsage(f)
	if isSize(f) {
		name = "size"
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		name = ""
	}
	dash := "--"
	if len(f.Name) == 1 {
		dash = "-"
	}
	if name == "" {
		return dash + f.Name
	}
	return dash + f.Name + " " + name
}

// FlagHelp is f's help text as the usage shows it: the usage string (a
// `name` in back quotes stands for the value and loses its quotes) with
// "(default V)" appended when the default is not the zero value.
func FlagHelp(f *flag.Flag) string {
	_, usage := flag.UnquoteUsage(f)
	if d, ok := defaultText(f); ok {
		usage += " (default " + d + ")"
	}
	return usage
}

// defaultText returns f's default as the help shows it, false for a zero
// default (0, "", false, 0s), which the help text explains if it means
// something else.
func defaultText(f *flag.Flag) (string, bool) {
	d := f.DefValue
	switch d {
	case "", "0", "false", "0s", "[]":
		return "", false
	}
	if isSize(f) {
		if n, err := ParseSize(d); err == nil {
			return FormatSize(n), true
		}
	}
	return d, true
}

// wrap splits s into lines of at most width bytes at spaces (a longer word
// gets a line of its own). The phrases "V = X" and "(default V" stay on
// one line.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(strings.NewReplacer(" = ", "\x00=\x00", "(default ", "(default\x00").Replace(s)) {
		word = strings.ReplaceAll(word, "\x00", " ")
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
