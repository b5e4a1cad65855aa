// Command storecmp compares embedded stores for quiot's broker state on the
// write pattern of its history: records of ~100 bytes (8-byte sequence
// key), appended in group commits of -batch records, each commit synced,
// the oldest deleted so that -window records stay. It prints the bytes
// the process wrote to the block layer per record (/proc/self/io
// write_bytes), the syncs per record and the peak RSS.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// engine is one store under test.
type engine interface {
	// commit writes puts and deletes in one synced batch.
	commit(puts [][2][]byte, dels [][]byte) error
	close() error
}

var engines = map[string]func(dir string) (engine, error){}

func procIO(key string) int64 {
	f, _ := os.Open("/proc/self/" + map[bool]string{true: "io", false: "status"}[key == "write_bytes"])
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return -1
}

func main() {
	name := flag.String("engine", "", "bbolt, pebble or badger")
	n := flag.Int("n", 20000, "records")
	batch := flag.Int("batch", 1, "records per commit")
	window := flag.Int("window", 10000, "records kept (older ones deleted)")
	size := flag.Int("size", 100, "record bytes")
	dir := flag.String("dir", "", "data directory (a new temporary one by default)")
	flag.Parse()
	mk, ok := engines[*name]
	if !ok {
		fmt.Fprintf(os.Stderr, "engine %q not built in (build tags)\n", *name)
		os.Exit(2)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("/var/tmp", "storecmp-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	e, err := mk(*dir)
	if err != nil {
		panic(err)
	}
	val := make([]byte, *size)
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
	w0 := procIO("write_bytes")
	start := time.Now()
	commits := 0
	for i := 0; i < *n; i += *batch {
		var puts [][2][]byte
		var dels [][]byte
		for j := i; j < i+*batch && j < *n; j++ {
			puts = append(puts, [2][]byte{key(j), val})
			if j >= *window {
				dels = append(dels, key(j-*window))
			}
		}
		if err := e.commit(puts, dels); err != nil {
			panic(err)
		}
		commits++
	}
	el := time.Since(start)
	if err := e.close(); err != nil {
		panic(err)
	}
	w := procIO("write_bytes") - w0
	var du int64
	ents, _ := os.ReadDir(*dir)
	for _, de := range ents {
		if fi, err := de.Info(); err == nil {
			du += fi.Size()
		}
	}
	fmt.Printf("engine=%s n=%d batch=%d size=%d window=%d  disk_bytes_per_record=%.0f  syncs_per_record=%.3f  us_per_record=%.1f  peak_rss_MiB=%.1f  files_MiB=%.1f\n",
		*name, *n, *batch, *size, *window, float64(w)/float64(*n), float64(commits)/float64(*n), float64(el.Microseconds())/float64(*n), float64(procIO("VmHWM"))/1024, float64(du)/(1<<20))
}
