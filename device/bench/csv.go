package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// csvFixed are the leading columns of runs.csv, before the metrics and the
// diagnostics ("diag.<key>").
var csvFixed = []string{"proto", "publish_mode", "tuning", "profile", "payload", "repeat", "ok", "error", "sent", "received", "wall_s"}

// WriteCSV writes one row per sample: the configuration, the eight metrics
// and every diagnostic key any sample has.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	keys := diagKeys(samples)
	head := append([]string{}, csvFixed...)
	for _, f := range MetricFields {
		head = append(head, f.Name)
	}
	for _, k := range keys {
		head = append(head, "diag."+k)
	}
	if err := cw.Write(head); err != nil {
		return fmt.Errorf("couldn't write csv: %w", err)
	}
	for i := range samples {
		s := &samples[i]
		row := []string{s.Proto, s.Mode, s.Tuning, s.Profile, strconv.Itoa(s.Payload), strconv.Itoa(s.Repeat),
			strconv.FormatBool(s.OK), s.Err, strconv.FormatInt(s.Sent, 10), strconv.FormatInt(s.Received, 10), fmtFloat(s.WallS)}
		for _, f := range MetricFields {
			row = append(row, fmtFloat(f.Get(&s.Metrics)))
		}
		for _, k := range keys {
			if v, ok := s.Diag[k]; ok {
				row = append(row, fmtFloat(v))
			} else {
				row = append(row, "")
			}
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("couldn't write csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("couldn't write csv: %w", err)
	}
	return nil
}

// WriteCSVFile writes runs.csv at path.
func WriteCSVFile(path string, samples []Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("couldn't create csv: %w", err)
	}
	if err := WriteCSV(f, samples); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("couldn't write csv: %w", err)
	}
	return nil
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ReadCSV parses a runs.csv written by WriteCSV back into samples.
func ReadCSV(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	rows, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("bad runs.csv: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("bad runs.csv: empty")
	}
	head := rows[0]
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, h := range csvFixed {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("bad runs.csv: no column %q", h)
		}
	}
	var out []Sample
	for n, row := range rows[1:] {
		line := n + 2
		if len(row) != len(head) {
			return nil, fmt.Errorf("bad runs.csv line %d: %d fields, want %d", line, len(row), len(head))
		}
		num := func(name string) (float64, error) {
			v := row[col[name]]
			if v == "" {
				return 0, nil
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("bad runs.csv line %d column %s: %q is not a number", line, name, v)
			}
			return f, nil
		}
		s := Sample{Config: Config{Proto: row[col["proto"]], Mode: row[col["publish_mode"]], Tuning: row[col["tuning"]], Profile: row[col["profile"]]}, Err: row[col["error"]], Diag: map[string]float64{}}
		var vals [5]float64
		for i, name := range []string{"payload", "repeat", "sent", "received", "wall_s"} {
			if vals[i], err = num(name); err != nil {
				return nil, err
			}
		}
		s.Payload, s.Repeat, s.Sent, s.Received, s.WallS = int(vals[0]), int(vals[1]), int64(vals[2]), int64(vals[3]), vals[4]
		if s.OK, err = strconv.ParseBool(row[col["ok"]]); err != nil {
			return nil, fmt.Errorf("bad runs.csv line %d column ok: %q", line, row[col["ok"]])
		}
		for _, f := range MetricFields {
			if _, ok := col[f.Name]; !ok {
				continue
			}
			v, err := num(f.Name)
			if err != nil {
				return nil, err
			}
			f.Set(&s.Metrics, v)
		}
		for i, h := range head {
			if k, ok := strings.CutPrefix(h, "diag."); ok && row[i] != "" {
				v, err := num(h)
				if err != nil {
					return nil, err
				}
				s.Diag[k] = v
			}
		}
		out = append(out, s)
	}
	return out, nil
}
