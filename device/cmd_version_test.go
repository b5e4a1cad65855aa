package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	if err := runVersion(context.Background(), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"quiot ", "go:", "board:", "drivers loaded:", "drivers skipped:", "drivers failed:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runVersion(context.Background(), []string{"--json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if v.Board == "" || v.Go == "" || v.Version == "" {
		t.Errorf("incomplete: %+v", v)
	}
}
