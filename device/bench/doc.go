// Package bench is the experiment harness behind `quiot bench`: it runs the
// HTTP/3 pub-sub vs MQTT-over-QUIC matrix (protocols x publish modes x QUIC
// tuning profiles x link profiles x payload sizes x repeats), each role as its
// own process of the quiot binary with the userspace link emulator in between,
// and writes runs.csv (every repeat), summary.json (medians over repeats, the
// schema in docs/BENCH.md), report.md with PNG plots and 95 % confidence
// intervals, and for the tuning study TUNING.md.
//
// The pieces are usable apart: Expand turns a Spec into the list of runs,
// Aggregate turns samples into summary runs, WriteCSV, WriteSummary and
// WriteReport write the outputs, and Runner executes a Spec.
package bench
