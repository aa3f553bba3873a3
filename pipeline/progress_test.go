package pipeline_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/evolm/evolm/pipeline"
)

func TestProgressTTY(t *testing.T) {
	var buf bytes.Buffer
	p := pipeline.NewProgress("dedup", 1_000_000, "tty", &buf, nil)
	p.Add(250_000)
	pipeline.ReportNow(p)
	mid := buf.String()
	for _, want := range []string{"\r\x1b[K", "dedup: 250,000/1,000,000 rows (25%)", "rows/s", "ETA "} {
		if !strings.Contains(mid, want) {
			t.Errorf("tty line %q lacks %q", mid, want)
		}
	}
	p.Add(750_000)
	p.Done()
	p.Done() // idempotent
	final := strings.TrimPrefix(buf.String(), mid)
	if !strings.Contains(final, "dedup: 1,000,000/1,000,000 rows (100%)") || !strings.HasSuffix(final, "\n") || strings.Count(final, "\n") != 1 {
		t.Errorf("final tty output %q", final)
	}
}

func TestProgressLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	p := pipeline.NewProgress("rollout", 0, "log", &bytes.Buffer{}, log)
	p.Add(42)
	pipeline.ReportNow(p)
	p.Done()
	out := buf.String()
	for _, want := range []string{"msg=progress task=rollout rows=42", "msg=done task=rollout rows=42", "elapsed="} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "eta=") {
		t.Errorf("ETA without a total:\n%s", out)
	}
}

func TestProgressOffAndMode(t *testing.T) {
	var buf bytes.Buffer
	p := pipeline.NewProgress("x", 10, "off", &buf, slog.New(slog.NewTextHandler(&buf, nil)))
	p.Add(10)
	p.Done()
	if buf.Len() != 0 {
		t.Errorf("off mode wrote %q", buf.String())
	}
	// A buffer is not a terminal: auto means log lines.
	if got := pipeline.ProgressMode("auto", &buf); got != "log" {
		t.Errorf("ProgressMode(auto, buffer) = %q, want log", got)
	}
	if got := pipeline.ProgressMode("tty", &buf); got != "tty" {
		t.Errorf("ProgressMode(tty) = %q", got)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := pipeline.NewLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown","k":1`) {
		t.Errorf("json logger wrote %q", out)
	}
	if _, err := pipeline.NewLogger(&buf, "loud", "text"); err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("bad level: %v", err)
	}
	if _, err := pipeline.NewLogger(&buf, "info", "xml"); err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Errorf("bad format: %v", err)
	}
}
