//go:build pebble

package main

import "github.com/cockroachdb/pebble"

type pebbleEngine struct{ db *pebble.DB }

func init() {
	engines["pebble"] = func(dir string) (engine, error) {
		db, err := pebble.Open(dir, &pebble.Options{})
		return &pebbleEngine{db}, err
	}
}

func (e *pebbleEngine) commit(puts [][2][]byte, dels [][]byte) error {
	b := e.db.NewBatch()
	for _, p := range puts {
		if err := b.Set(p[0], p[1], nil); err != nil {
			return err
		}
	}
	for _, k := range dels {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

func (e *pebbleEngine) close() error { return e.db.Close() }
