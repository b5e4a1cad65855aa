// Package cli is the subcommand plumbing shared by quiot and ovsprobe: a
// registry of commands, dispatch with signal handling and exit statuses, and
// flag parsing that turns mistakes into usage errors. Mains stay thin: they
// build an App, register commands from init in their cmd_*.go files and call
// Main.
//
// # Help
//
// "PROGRAM help CMD" prints what "PROGRAM CMD -h" prints (on stdout instead
// of stderr), "PROGRAM help" the list of commands. A command's -h text is
// written by WriteUsage: flags as "--name VALUE" under the group headings
// the command sets with SetHelp (ungrouped flags under "Other flags"), then
// the command's examples.
//
// One convention for defaults, in every command's flags:
//
//   - The usage printer appends "(default V)" from the flag's registered
//     default whenever that is not the zero value (0, "", false, 0s). A
//     usage string never spells out its own default.
//   - A flag whose zero value (or another special value) stands for
//     something says so in its usage string with the phrase "0 = X"
//     ("empty = X" for strings, "-1 = X" and the like for other values),
//     e.g. "open connections in all (0 = 1024)" or "(0 = until
//     interrupted)".
//
// Byte-size flags (see SizeFlags) accept the forms of ParseSize ("1k",
// "256KiB", "128MiB", plain bytes) on the command line and in a
// configuration file, and show their default as a size.
//
// A mistyped flag is a usage error of one line that suggests the closest
// flag ("unknown flag --lisen; did you mean --listen?") followed by a hint
// to "PROGRAM CMD -h", instead of the whole flag list.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// ErrUsage marks a usage error: Main exits with status 2 instead of 1.
var ErrUsage = errors.New("usage error")

// Command is one subcommand.
type Command struct {
	// Name is the word that selects the command.
	Name string
	// Summary is the one-line description in the usage text.
	Summary string
	// Run parses args (without the command name) and does the work; it
	// returns when ctx is cancelled (a signal) or the work is done.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// App is a program made of subcommands.
type App struct {
	// Name is the program name used in messages ("quiot").
	Name string
	// Tagline heads the usage text.
	Tagline string
	// Footer ends the usage text; empty means a pointer to '<cmd> -h'.
	Footer string
	// Signals cancel the command's context; nil means SIGINT and SIGTERM.
	Signals []os.Signal
	// InterruptedStatus, when non-zero, is the exit status of a command that
	// returned after a signal (ovsprobe uses 130 after tearing down), and a
	// note that it cleaned up is printed. Zero treats such returns like any
	// other.
	InterruptedStatus int

	commands map[string]Command
}

// Register adds a command; it panics on a duplicate name (a programming
// error caught by any test of the main package).
func (a *App) Register(c Command) {
	if a.commands == nil {
		a.commands = map[string]Command{}
	}
	if _, dup := a.commands[c.Name]; dup {
		panic(a.Name + ": duplicate command " + c.Name)
	}
	a.commands[c.Name] = c
}

// Usage writes the usage text with every command.
func (a *App) Usage(w io.Writer) {
	fmt.Fprintf(w, "%s: %s\n\nUsage: %s <command> [flags]\n\nCommands:\n", a.Name, a.Tagline, a.Name)
	names := make([]string, 0, len(a.commands))
	width := 0
	for n := range a.commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width+1, n, a.commands[n].Summary)
	}
	footer := a.Footer
	if footer == "" {
		footer = fmt.Sprintf("Run '%s help <command>' (or '%s <command> -h') for the flags of a command.", a.Name, a.Name)
	}
	fmt.Fprintf(w, "\n%s\n", footer)
}

// Main runs the command named by args[0] and returns the exit status: 0 on
// success or -h, 2 on a usage error or unknown command, 1 on other errors,
// InterruptedStatus (when set) after a signal.
//
// "help CMD" runs CMD with -h and its help on stdout.
func (a *App) Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" {
		c, ok := a.commands[args[1]]
		if !ok {
			fmt.Fprintf(stderr, "%s: unknown command %q\n\n", a.Name, args[1])
			a.Usage(stderr)
			return 2
		}
		// The command's flag set writes its help to the stderr it is given.
		if err := c.Run(context.Background(), []string{"-h"}, stdout, stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "%s %s: %v\n", a.Name, c.Name, err)
			return 1
		}
		return 0
	}
	if len(args) > 2 && args[0] == "help" {
		fmt.Fprintf(stderr, "%s help: want at most one command name\n", a.Name)
		return 2
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		a.Usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := a.commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", a.Name, args[0])
		a.Usage(stderr)
		return 2
	}
	sigs := a.Signals
	if sigs == nil {
		sigs = []os.Signal{os.Interrupt, syscall.SIGTERM}
	}
	// The first signal cancels ctx; later ones are absorbed until the
	// command has returned (stop runs last), so a second Ctrl-C does not cut
	// a teardown short.
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	err := c.Run(ctx, args[1:], stdout, stderr)
	prefix := a.Name + " " + c.Name
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		var fe *flagError
		if errors.As(err, &fe) {
			fmt.Fprintf(stderr, "Run '%s -h' for the list of flags.\n", fe.set)
		}
		return 2
	case a.InterruptedStatus != 0 && ctx.Err() != nil:
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		}
		fmt.Fprintf(stderr, "%s: interrupted; cleaned up\n", prefix)
		return a.InterruptedStatus
	default:
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return 1
	}
}

// NewFlagSet returns a FlagSet named "PROGRAM NAME" that reports errors
// instead of exiting, so Main decides the exit status. Its -h text is
// WriteUsage's with the zero Help; SetHelp adds groups and examples.
func NewFlagSet(program, name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(program+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	SetHelp(fs, Help{})
	return fs
}

// flagError is a mistake on the command line of the flag set named set
// ("quiot broker"): a usage error after which Main points to set's -h.
type flagError struct {
	set, msg string
}

func (e *flagError) Error() string { return e.msg }

// Unwrap makes a flagError a usage error.
func (e *flagError) Unwrap() error { return ErrUsage }

// ParseFlags parses args into fs; a parse failure or a stray argument is a
// usage error of one line (an unknown flag names the closest flag), not
// the flag list; flag.ErrHelp passes through after fs.Usage has run.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	if usage == nil {
		usage = func() { WriteUsage(out, fs, Help{}) }
	}
	// The flag package prints the error and the whole usage on any
	// mistake; silence it and report one line instead.
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return err
		}
		return &flagError{set: fs.Name(), msg: flagMessage(fs, err.Error())}
	}
	if fs.NArg() > 0 {
		return &flagError{set: fs.Name(), msg: "unexpected arguments: " + strings.Join(fs.Args(), " ")}
	}
	return nil
}

// flagMessage rewrites a flag package error in the program's own words:
// flags with two dashes, a suggestion for an unknown flag.
func flagMessage(fs *flag.FlagSet, msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		if s, ok := closestFlag(fs, name); ok {
			return fmt.Sprintf("unknown flag --%s; did you mean --%s?", name, s)
		}
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "flag --" + strings.TrimLeft(name, "-") + " needs a value"
	}
	// "invalid value "x" for flag -n: parse error", "invalid boolean value
	// "x" for -dev: parse error".
	msg = strings.Replace(msg, " for flag -", " for -", 1)
	return strings.Replace(msg, " for -", " for --", 1)
}

// NewLogger returns a text slog logger on w at the named level (debug,
// info, warn, error); a bad name is a usage error.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: bad --log-level %q (debug, info, warn, error)", ErrUsage, level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// Names returns the names of the registered commands, sorted.
func (a *App) Names() []string {
	names := make([]string, 0, len(a.commands))
	for n := range a.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the command registered under name.
func (a *App) Lookup(name string) (Command, bool) {
	c, ok := a.commands[name]
	return c, ok
}
