package startpages

import (
	"strings"
	"testing"
)

func TestParseMaps(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Mapping
		wantErr string
	}{
		{
			name: "binary, heap, anonymous, path with a space",
			in: "00400000-00c3a000 r-xp 00000000 fe:01 1835230                            /usr/bin/quiot\n" +
				"00c3a000-0152f000 r--p 0083a000 fe:01 1835230                            /usr/bin/quiot\n" +
				"0152f000-01580000 rw-p 0112f000 fe:01 1835230                            /usr/bin/quiot\n" +
				"01580000-015c0000 rw-p 00000000 00:00 0 \n" +
				"c000000000-c000400000 rw-p 00000000 00:00 0                          [heap]\n" +
				"7f00000000-7f00001000 r--p 00001000 08:02 42  /opt/my dir/lib.so (deleted)\n",
			want: []Mapping{
				{Start: 0x400000, End: 0xc3a000, Perms: "r-xp", Inode: 1835230, Path: "/usr/bin/quiot"},
				{Start: 0xc3a000, End: 0x152f000, Perms: "r--p", Offset: 0x83a000, Inode: 1835230, Path: "/usr/bin/quiot"},
				{Start: 0x152f000, End: 0x1580000, Perms: "rw-p", Offset: 0x112f000, Inode: 1835230, Path: "/usr/bin/quiot"},
				{Start: 0x1580000, End: 0x15c0000, Perms: "rw-p"},
				{Start: 0xc000000000, End: 0xc000400000, Perms: "rw-p", Path: "[heap]"},
				{Start: 0x7f00000000, End: 0x7f00001000, Perms: "r--p", Offset: 0x1000, Inode: 42, Path: "/opt/my dir/lib.so (deleted)"},
			},
		},
		{name: "empty", in: "", want: nil},
		{name: "too few fields", in: "00400000-00c3a000 r-xp 00000000\n", wantErr: "line 1: 3 fields"},
		{name: "no dash", in: "00400000 r-xp 00000000 fe:01 1\n", wantErr: "has no '-'"},
		{name: "bad start", in: "zz-00c3a000 r-xp 00000000 fe:01 1\n", wantErr: "start address"},
		{name: "end before start", in: "00c3a000-00400000 r-xp 00000000 fe:01 1\n", wantErr: "ends before it starts"},
		{name: "short perms", in: "00400000-00c3a000 r-x 00000000 fe:01 1\n", wantErr: "not 4 characters"},
		{name: "bad inode", in: "00400000-00c3a000 r-xp 00000000 fe:01 x\n", wantErr: "inode"},
		{name: "bad offset", in: "00400000-00c3a000 r-xp 0g fe:01 1\n", wantErr: "offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMaps(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d mappings, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("mapping %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestReadOnlyFile(t *testing.T) {
	tests := []struct {
		m    Mapping
		want bool
	}{
		{Mapping{Perms: "r-xp", Inode: 1}, true},
		{Mapping{Perms: "r--p", Inode: 1}, true},
		{Mapping{Perms: "r--s", Inode: 1}, true},
		{Mapping{Perms: "rw-p", Inode: 1}, false}, // .data: written pages would be lost
		{Mapping{Perms: "r-xp", Inode: 0}, false}, // anonymous
		{Mapping{Perms: "---p", Inode: 1}, false},
	}
	for _, tt := range tests {
		if got := tt.m.ReadOnlyFile(); got != tt.want {
			t.Errorf("%+v.ReadOnlyFile() = %v, want %v", tt.m, got, tt.want)
		}
	}
}

// FuzzParseMaps: any text gives mappings or an error, never a panic, and
// every mapping it returns is well formed.
func FuzzParseMaps(f *testing.F) {
	f.Add("00400000-00c3a000 r-xp 00000000 fe:01 1835230 /usr/bin/quiot\n")
	f.Add("7f00000000-7f00001000 r--p 00001000 08:02 42  /opt/my dir/lib.so (deleted)\n")
	f.Add("c000000000-c000400000 rw-p 00000000 00:00 0 [heap]\n")
	f.Fuzz(func(t *testing.T, in string) {
		ms, err := ParseMaps(in)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.End < m.Start || len(m.Perms) != 4 {
				t.Fatalf("malformed mapping %+v from %q", m, in)
			}
		}
	})
}
