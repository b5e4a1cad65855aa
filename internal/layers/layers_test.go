package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/quiot/quiot/"

// rules: packages under from (the module-relative prefix) must not import
// packages under any of deny, except those under one of allow. tests says
// whether the packages' test imports count too.
var rules = []struct {
	from  string
	deny  []string
	allow []string
	tests bool
}{
	{from: "internal/", deny: []string{"broker", "device", "probe"}, tests: true},
	{from: "broker", deny: []string{"device", "probe"}},
	// A broker node is assembled by a library the command only configures
	// (broker/node): it and its tests stay below the device.
	{from: "broker/node", deny: []string{"device", "probe"}, tests: true},
	{from: "probe", deny: []string{"broker", "device"}, tests: true},
	{from: "device/client", deny: []string{"broker", "probe"}},
	{from: "device/hw", deny: []string{"broker", "probe"}},
	// The topic space is below every front end, the cluster link and the
	// store: it defines the interfaces they implement (see its package doc).
	{from: "broker/space", deny: []string{"broker", "device", "probe"}, allow: []string{"broker/space"}, tests: true},
}

// pkgImports lists every package of the module with its imports and its
// test imports, from `go list`.
func pkgImports(t *testing.T) (imports, testImports map[string][]string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to list packages with: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-f",
		"{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}",
		module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	imports, testImports = map[string][]string{}, map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "|", 3)
		if len(f) != 3 {
			t.Fatalf("unexpected go list line %q", sc.Text())
		}
		p := strings.TrimPrefix(f[0], module)
		imports[p] = strings.Fields(f[1])
		testImports[p] = strings.Fields(f[2])
	}
	if len(imports) < 10 {
		t.Fatalf("go list found only %d packages", len(imports))
	}
	return imports, testImports
}

// under reports whether the module-relative package p is prefix or below it.
func under(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

func TestNoUpwardImports(t *testing.T) {
	imports, testImports := pkgImports(t)
	for _, r := range rules {
		t.Run(strings.TrimSuffix(r.from, "/"), func(t *testing.T) {
			seen := 0
			for p, imps := range imports {
				if !under(p, r.from) {
					continue
				}
				seen++
				all := imps
				if r.tests {
					all = append(append([]string{}, imps...), testImports[p]...)
				}
				for _, imp := range all {
					rel, ok := strings.CutPrefix(imp, module)
					if !ok {
						continue
					}
					for _, d := range r.deny {
						if under(rel, d) && !slices.ContainsFunc(r.allow, func(a string) bool { return under(rel, a) }) {
							t.Errorf("%s imports %s: %s must not look up at %s", p, rel, r.from, d)
						}
					}
				}
			}
			if seen == 0 {
				t.Fatalf("no package under %s: the rule is stale", r.from)
			}
		})
	}
}
