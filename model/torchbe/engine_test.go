package torchbe

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestOneThread: with Options.OneThread, Score, ScoreNaive and LogProbs
// called from several goroutines at once answer as without it, and run off
// their callers' threads (no caller's thread enters libtorch, so none keeps
// a libgomp pool); a canceled call fails with its context's error; after
// Close they fail.
func TestOneThread(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 7)
	plain, err := Load(Options{Dir: dir, ModelID: "tiny", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	one, err := Load(Options{Dir: dir, ModelID: "tiny", Threads: 1, OneThread: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sreq := []backend.ScoreRequest{
		{ID: "a", Prefix: "Is the sky blue? It is.", Suffixes: []string{" Correct?", " Polite?"}, Candidates: []string{" yes", " no"}},
		{ID: "b", Prefix: "Is grass red? No.", Suffixes: []string{" Correct?"}, Candidates: []string{" yes", " no"}},
	}
	lreq := []backend.LogProbRequest{{ID: "l", Prompt: "Hello", Completion: " there, friend"}}
	wantScore, err := plain.Score(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	wantNaive, err := plain.ScoreNaive(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	wantLP, err := plain.LogProbs(ctx, lreq)
	if err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	for range 3 {
		g.Go(func() error {
			runtime.LockOSThread() // so that ThreadClaimed asks about this goroutine's thread
			defer runtime.UnlockOSThread()
			for range 4 {
				got, err := one.Score(ctx, sreq)
				if err != nil {
					return err
				}
				if d := cmp.Diff(wantScore, got); d != "" {
					t.Errorf("Score on the engine thread differs (-want +got):\n%s", d)
				}
				naive, err := one.ScoreNaive(ctx, sreq)
				if err != nil {
					return err
				}
				if d := cmp.Diff(wantNaive, naive); d != "" {
					t.Errorf("ScoreNaive on the engine thread differs (-want +got):\n%s", d)
				}
				lp, err := one.LogProbs(ctx, lreq)
				if err != nil {
					return err
				}
				if d := cmp.Diff(wantLP, lp); d != "" {
					t.Errorf("LogProbs on the engine thread differs (-want +got):\n%s", d)
				}
			}
			if torch.ThreadClaimed() {
				t.Error("a caller's thread entered libtorch")
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := one.Score(canceled, sreq); !errors.Is(err, context.Canceled) {
		t.Fatalf("Score with a canceled context: %v, want context.Canceled", err)
	}
	one.Close()
	if _, err := one.Score(ctx, sreq); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Score after Close: %v, want an error saying the model is closed", err)
	}
}
