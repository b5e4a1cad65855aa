//go:build badger

package main

import badger "github.com/dgraph-io/badger/v4"

type badgerEngine struct{ db *badger.DB }

func init() {
	engines["badger"] = func(dir string) (engine, error) {
		db, err := badger.Open(badger.DefaultOptions(dir).WithSyncWrites(true).WithLogger(nil))
		return &badgerEngine{db}, err
	}
}

func (e *badgerEngine) commit(puts [][2][]byte, dels [][]byte) error {
	return e.db.Update(func(tx *badger.Txn) error {
		for _, p := range puts {
			if err := tx.Set(p[0], p[1]); err != nil {
				return err
			}
		}
		for _, k := range dels {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *badgerEngine) close() error { return e.db.Close() }
