//go:build bbolt

package main

import bolt "go.etcd.io/bbolt"

type boltEngine struct{ db *bolt.DB }

func init() {
	engines["bbolt"] = func(dir string) (engine, error) {
		db, err := bolt.Open(dir+"/s.db", 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
		if err != nil {
			return nil, err
		}
		return &boltEngine{db}, db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("h")); return err })
	}
}

func (e *boltEngine) commit(puts [][2][]byte, dels [][]byte) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("h"))
		b.FillPercent = 1
		for _, p := range puts {
			if err := b.Put(p[0], p[1]); err != nil {
				return err
			}
		}
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *boltEngine) close() error { return e.db.Close() }
