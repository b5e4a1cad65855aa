// Package config applies quiot's TOML configuration file to a subcommand's
// flag set. The file has one table per role ([broker], [pub], [sub]) whose
// keys are the role's flag names; a flag given on the command line wins over
// the file.
//
//	[broker]
//	listen = ":4433"
//	metrics-listen = "127.0.0.1:9464"
//	dev = false
//
// A value is given to the flag as its text, so it is written as on the
// command line: byte sizes as "1k", "256KiB", "128MiB" or plain bytes (TOML
// integers are bytes), durations as "5m", lists as TOML arrays or
// comma-separated strings.
//
//	[broker]
//	max-payload = "1k"
//	history-bytes = "128MiB"
//	shutdown-grace = "10s"
//
// Unknown tables, unknown keys and values a flag rejects are errors that name
// the file, the line and the key, with the flag's own reason (for a size, the
// accepted forms).
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/quiot/quiot/internal/cli"
)

// DefaultPath is where the roles look for their configuration when --config
// is not given. A missing file at the default path is not an error.
const DefaultPath = "/etc/quiot/quiot.toml"

// FlagName is the name of the flag that selects the configuration file.
const FlagName = "config"

// Sections are the tables a configuration file may hold, one per role.
var Sections = []string{"broker", "pub", "sub"}

// ArrayTables are the arrays of tables ([[name]]) a configuration file may
// hold besides the role tables; Parse leaves them to the code that reads
// them: [[bridge]], the broker's bridges (broker/bridge, docs/bridge.md).
var ArrayTables = []string{"bridge"}

// skipKeys are flags that make no sense inside the file itself.
var skipKeys = map[string]bool{FlagName: true, "check-config": true}

// Error is a configuration error at a place in the file. Line is 0 when the
// place is not known.
type Error struct {
	Path    string // file name
	Line    int    // 1-based line, 0 if unknown
	Section string // table, "" for top level
	Key     string // key, "" for the whole table
	Err     error
}

// Error implements error: "FILE:LINE: [section] key "k": reason".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Section != "" {
		fmt.Fprintf(&b, "[%s] ", e.Section)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ApplyFlag applies the file named by fs's --config flag (see FlagName) to the
// other flags of fs. When --config was not given on the command line and the
// file at its default value does not exist, ApplyFlag does nothing; a file
// named explicitly must exist. fs must already be parsed. If fs has no
// --config flag, ApplyFlag does nothing.
func ApplyFlag(fs *flag.FlagSet, section string) error {
	f := fs.Lookup(FlagName)
	if f == nil {
		return nil
	}
	path := f.Value.String()
	if path == "" {
		return nil
	}
	if !isSet(fs, FlagName) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return Apply(fs, section, path)
}

// Apply reads the TOML file at path and, for each key of table section whose
// flag was not set on the command line, calls fs.Set(key, value). Tables of
// other roles (see Sections) are checked for syntax only. fs must already be
// parsed.
func Apply(fs *flag.FlagSet, section, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("config file %s does not exist: %w", path, err)
		}
		return fmt.Errorf("read config: %w", err)
	}
	return ApplyData(fs, section, path, data)
}

// ApplyData is Apply on the file's contents; name is used in errors.
func ApplyData(fs *flag.FlagSet, section, name string, data []byte) error {
	vals, err := Parse(name, data)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, kv := range vals[section] {
		fail := func(err error) error {
			return &Error{Path: name, Line: kv.Line, Section: section, Key: kv.Key, Err: err}
		}
		if skipKeys[kv.Key] {
			return fail(errors.New("not allowed in the configuration file"))
		}
		if fs.Lookup(kv.Key) == nil {
			if s, ok := cli.ClosestFlag(fs, kv.Key); ok && !skipKeys[s] {
				return fail(fmt.Errorf("unknown key (%s has no --%s flag; did you mean %s?)", fs.Name(), kv.Key, s))
			}
			return fail(fmt.Errorf("unknown key (%s has no --%s flag)", fs.Name(), kv.Key))
		}
		if set[kv.Key] {
			continue // the command line wins
		}
		if err := fs.Set(kv.Key, kv.Value); err != nil {
			return fail(fmt.Errorf("invalid value %q: %w", kv.Value, err))
		}
	}
	return nil
}

// KeyValue is one key of a table, its value as flag text, and its line.
type KeyValue struct {
	Key   string
	Value string
	Line  int
}

// Parse decodes a configuration file into its tables, each a list of keys
// sorted by line. It checks the TOML syntax, that every top-level name is a
// known table (see Sections) and that every value is a scalar or an array of
// scalars. name is used in errors.
func Parse(name string, data []byte) (map[string][]KeyValue, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{Path: name, Line: pe.Position.Line, Key: pe.LastKey, Err: errors.New(pe.Message)}
		}
		return nil, &Error{Path: name, Err: err}
	}
	lines := keyLines(data)
	out := map[string][]KeyValue{}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, sec := range names {
		if _, arr := raw[sec].([]map[string]any); arr {
			if slices.Contains(ArrayTables, sec) {
				continue
			}
			return nil, &Error{Path: name, Line: lines[lineKey{sec, ""}], Section: sec,
				Err: fmt.Errorf("[[%s]] (an array of tables) is not allowed: use [%s] once", sec, sec)}
		}
		tbl, ok := raw[sec].(map[string]any)
		if !ok {
			return nil, &Error{Path: name, Line: lines[lineKey{"", sec}], Key: sec,
				Err: fmt.Errorf("key outside a table: put it under one of [%s]", strings.Join(Sections, "], ["))}
		}
		if slices.Contains(ArrayTables, sec) {
			return nil, &Error{Path: name, Line: lines[lineKey{sec, ""}], Section: sec,
				Err: fmt.Errorf("write [[%s]] (an array of tables, one per %s)", sec, sec)}
		}
		if !known(sec) {
			return nil, &Error{Path: name, Line: lines[lineKey{sec, ""}], Section: sec,
				Err: fmt.Errorf("unknown table (want one of [%s])", strings.Join(Sections, "], ["))}
		}
		var kvs []KeyValue
		for k, v := range tbl {
			line := lines[lineKey{sec, k}]
			s, err := flagText(v)
			if err != nil {
				return nil, &Error{Path: name, Line: line, Section: sec, Key: k, Err: err}
			}
			kvs = append(kvs, KeyValue{Key: k, Value: s, Line: line})
		}
		sort.Slice(kvs, func(i, j int) bool {
			if kvs[i].Line != kvs[j].Line {
				return kvs[i].Line < kvs[j].Line
			}
			return kvs[i].Key < kvs[j].Key
		})
		out[sec] = kvs
	}
	return out, nil
}

func known(sec string) bool {
	for _, s := range Sections {
		if s == sec {
			return true
		}
	}
	return false
}

// flagText turns a TOML value into the text a flag.Value.Set accepts. Arrays
// become comma-separated lists (the form of list flags such as --protos).
func flagText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			if _, nested := e.([]any); nested {
				return "", errors.New("nested arrays are not allowed")
			}
			s, err := flagText(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", errors.New("a table is not allowed here (values are strings, numbers, booleans or arrays)")
	default:
		return "", fmt.Errorf("unsupported value type %T (use a string)", v)
	}
}

type lineKey struct{ section, key string }

// keyLines finds the line of each table header and of each key in it. The
// TOML decoder has already accepted the file; this only needs to locate
// the simple forms quiot's configuration uses ([table] headers and
// key = value lines with bare or quoted keys). Keys it cannot place get
// line 0.
func keyLines(data []byte) map[lineKey]int {
	out := map[lineKey]int{}
	sec := ""
	inMulti := "" // delimiter of a multi-line string being skipped
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		t := strings.TrimSpace(line)
		if inMulti != "" {
			if strings.Contains(t, inMulti) {
				inMulti = ""
			}
			continue
		}
		if t == "" || t[0] == '#' {
			continue
		}
		if t[0] == '[' {
			t = strings.TrimPrefix(t, "[")
			end := strings.IndexByte(t, ']')
			if end > 0 {
				sec = unquote(strings.TrimSpace(strings.TrimPrefix(t[:end], "[")))
				if _, ok := out[lineKey{sec, ""}]; !ok {
					out[lineKey{sec, ""}] = n
				}
				// [a.b] defines key b of table a.
				if parent, child, dotted := strings.Cut(sec, "."); dotted {
					child, _, _ = strings.Cut(child, ".")
					k := lineKey{strings.TrimSpace(parent), unquote(strings.TrimSpace(child))}
					if _, ok := out[k]; !ok {
						out[k] = n
					}
				}
			}
			continue
		}
		eq := strings.IndexByte(t, '=')
		if eq <= 0 {
			continue
		}
		k := strings.TrimSpace(t[:eq])
		if k != "" && k[0] != '"' && k[0] != '\'' {
			k, _, _ = strings.Cut(k, ".") // a.b = 1 defines key a of this table
			k = strings.TrimSpace(k)
		}
		k = unquote(k)
		if _, ok := out[lineKey{sec, k}]; !ok {
			out[lineKey{sec, k}] = n
		}
		rest := strings.TrimSpace(t[eq+1:])
		for _, d := range []string{`"""`, `'''`} {
			if strings.HasPrefix(rest, d) && !strings.Contains(rest[3:], d) {
				inMulti = d
			}
		}
	}
	return out
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

func isSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}
