package pipeline

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// Progress counts rows for one piece of work and reports rows/s and ETA: a
// redrawn line on a terminal, or a quiet slog line every LogEvery otherwise.
// Add is safe for concurrent use; Done stops reporting and prints a summary.
type Progress struct {
	label string
	total atomic.Int64 // 0: unknown
	done  atomic.Int64
	start time.Time
	mode  string // "tty", "log" or "off"
	w     io.Writer
	log   *slog.Logger
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// Progress report intervals.
var (
	TTYEvery = 200 * time.Millisecond
	LogEvery = 10 * time.Second
)

// ProgressMode resolves the pipeline.progress setting: "auto" becomes "tty"
// when w is a terminal and "log" otherwise.
func ProgressMode(setting string, w io.Writer) string {
	if setting != "auto" && setting != "" {
		return setting
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return "tty"
	}
	return "log"
}

// NewProgress starts reporting progress of label toward total rows (0 if
// unknown) in mode ("tty", "log" or "off") to w or log.
func NewProgress(label string, total int64, mode string, w io.Writer, log *slog.Logger) *Progress {
	p := &Progress{label: label, start: time.Now(), mode: mode, w: w, log: log, stop: make(chan struct{})}
	p.total.Store(total)
	if mode == "tty" || mode == "log" {
		every := LogEvery
		if mode == "tty" {
			every = TTYEvery
		}
		p.wg.Add(1)
		go p.loop(every)
	}
	return p
}

func (p *Progress) loop(every time.Duration) {
	defer p.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.report(false)
		}
	}
}

// Add counts n more rows done.
func (p *Progress) Add(n int64) { p.done.Add(n) }

// AddTotal raises the expected total by n rows.
func (p *Progress) AddTotal(n int64) { p.total.Add(n) }

// Rows is the count so far.
func (p *Progress) Rows() int64 { return p.done.Load() }

// Done stops reporting and reports the final count once.
func (p *Progress) Done() {
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		p.report(true)
	})
}

func (p *Progress) report(final bool) {
	done, total := p.done.Load(), p.total.Load()
	el := time.Since(p.start)
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	eta := time.Duration(-1)
	if total > 0 && rate > 0 && done <= total {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second))
	}
	switch p.mode {
	case "tty":
		line := fmt.Sprintf("%s: %s", p.label, humanInt(done))
		if total > 0 {
			line += fmt.Sprintf("/%s rows (%.0f%%)", humanInt(total), 100*float64(done)/float64(total))
		} else {
			line += " rows"
		}
		line += fmt.Sprintf("  %s rows/s", humanInt(int64(rate)))
		if final {
			line += fmt.Sprintf("  in %s\n", el.Round(time.Millisecond))
		} else if eta >= 0 {
			line += fmt.Sprintf("  ETA %s", eta.Round(time.Second))
		}
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
	case "log":
		if p.log == nil {
			return
		}
		attrs := []any{"task", p.label, "rows", done, "rows_per_s", int64(rate)}
		if total > 0 {
			attrs = append(attrs, "total", total)
		}
		if final {
			p.log.Info("done", append(attrs, "elapsed", el.Round(time.Millisecond).String())...)
		} else {
			if eta >= 0 {
				attrs = append(attrs, "eta", eta.Round(time.Second).String())
			}
			p.log.Info("progress", attrs...)
		}
	}
}

func humanInt(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// NewLogger builds the process logger: level debug|info|warn|error, format
// text|json, written to w.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("config key log.level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("config key log.format: %q is not one of text, json", format)
}
