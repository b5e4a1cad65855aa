package bench

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports the matrix's advance: a redrawn bar on a terminal, one
// plain line per run elsewhere (a log file or CI output gets no carriage
// returns).
type progress interface {
	// start announces run i (0-based) of the matrix.
	start(i int, id string)
	// done reports run i's outcome.
	done(i int, id string, ok bool, took time.Duration)
	// stop ends the report (a finished or cut-short matrix).
	stop()
}

// newProgress picks the bar for a terminal, plain lines otherwise, nothing
// for a nil writer.
func newProgress(w io.Writer, total int) progress {
	switch {
	case w == nil:
		return noProgress{}
	case isTerminal(w):
		return &barProgress{w: w, bar: progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("bench"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetWidth(24),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)}
	default:
		return &lineProgress{w: w, total: total}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

type noProgress struct{}

func (noProgress) start(int, string)                     {}
func (noProgress) done(int, string, bool, time.Duration) {}
func (noProgress) stop()                                 {}

// barProgress redraws one line on a terminal.
type barProgress struct {
	w        io.Writer
	bar      *progressbar.ProgressBar
	finished int
}

func (p *barProgress) start(_ int, id string) { p.bar.Describe(fmt.Sprintf("%-40s", id)) }

func (p *barProgress) done(int, string, bool, time.Duration) {
	p.finished++
	_ = p.bar.Add(1)
}

func (p *barProgress) stop() {
	if p.finished < p.bar.GetMax() {
		fmt.Fprintln(p.w) // the completion hook did not end the line
	}
}

// lineProgress writes one line per finished run.
type lineProgress struct {
	w     io.Writer
	total int
}

func (p *lineProgress) start(int, string) {}

func (p *lineProgress) done(i int, id string, ok bool, took time.Duration) {
	state := "ok"
	if !ok {
		state = "FAILED"
	}
	fmt.Fprintf(p.w, "bench [%d/%d] %s %s (%.1f s)\n", i+1, p.total, id, state, took.Seconds())
}

func (p *lineProgress) stop() {}
