package sample

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model/torch"
)

// mixedRows are greedy and temperature-only rows (sampleSimple's batches)
// with their own seeds.
func mixedRows(b int, seed uint64) []Row {
	temps := []float64{1, 0, 0.7, 1.3, 1, 0}
	rs := make([]Row, b)
	for i := range rs {
		rs[i] = Row{Params: Params{Temperature: temps[i%len(temps)]}, RNG: NewRNG(seed + uint64(i))}
	}
	return rs
}

// TestSimplePathLogProbsAreLogsumexp: the log-probs of the few-pass path are
// x[token] − torch.logsumexp(x), bit for bit, for greedy rows, T = 1 and
// other temperatures in one batch.
func TestSimplePathLogProbsAreLogsumexp(t *testing.T) {
	const b, v = 6, 1000
	s := torch.NewScope()
	defer s.Close()
	x, data := randomLogits(s, t, b, v, 21)
	res, err := Sample(s, x, mixedRows(b, 40))
	if err != nil {
		t.Fatal(err)
	}
	lse, err := torch.Float32s(s.Logsumexp(x, []int64{1}, false))
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range res.Tokens {
		if want := data[i*v+int(tok)] - lse[i]; res.LogProbs[i] != want {
			t.Errorf("row %d: log-prob %v, want %v (x[token] − logsumexp)", i, res.LogProbs[i], want)
		}
	}
}

// TestWorkspaceReuse: one Workspace carried across steps of changing batch
// size (growing and shrinking, as a decode loop's rows finish or a new
// chunk starts) gives the tokens and log-probs of fresh temporaries, and
// frees everything on Close.
func TestWorkspaceReuse(t *testing.T) {
	const v = 500
	base := torch.Live()
	func() {
		s := torch.NewScope()
		defer s.Close()
		ws := &Workspace{}
		defer ws.Close()
		for step, b := range []int{4, 2, 6, 3, 6, 1} {
			x, _ := randomLogits(s, t, b, v, uint64(100+step))
			got, err := SampleWith(s, ws, x, mixedRows(b, uint64(10*step)))
			if err != nil {
				t.Fatal(err)
			}
			want, err := Sample(s, x, mixedRows(b, uint64(10*step)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("step %d (batch %d): workspace vs fresh (-fresh +workspace):\n%s", step, b, diff)
			}
			// The logits buffer: a view of the requested shape, reused.
			lg, err := ws.Logits(s, int64(b), v, torch.CPU)
			if err != nil {
				t.Fatal(err)
			}
			if sh, _ := torch.Shape(lg); !slices.Equal(sh, []int64{int64(b), v}) {
				t.Errorf("step %d: logits buffer view %v, want [%d %d]", step, sh, b, v)
			}
		}
		if ws.work.rows != 6 || ws.logits.rows != 6 {
			t.Errorf("buffers hold %d and %d rows, want 6 (the largest batch)", ws.work.rows, ws.logits.rows)
		}
	}()
	if got := torch.Live(); got != base {
		t.Errorf("live tensors %d after Close, want %d", got, base)
	}
}

// TestPlainRowsIgnoreTheirBatch: a temperature-only row draws the same
// tokens whether its batch holds only such rows (the few-pass path) or also
// top-k and top-p rows (the general path).
func TestPlainRowsIgnoreTheirBatch(t *testing.T) {
	const v, steps = 3000, 200
	s := torch.NewScope()
	defer s.Close()
	x, _ := randomLogits(s, t, 3, v, 8)
	draw := func(idx []int64, params []Params) []int64 {
		sub := s.IndexSelect(x, 0, s.FromInt64(idx, int64(len(idx))))
		rs := make([]Row, len(idx))
		for i, p := range params {
			rs[i] = Row{Params: p, RNG: NewRNG(uint64(idx[i]))}
		}
		var out []int64
		for st := 0; st < steps; st++ {
			res, err := Sample(s, sub, rs)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res.Tokens[0])
		}
		return out
	}
	plain := Params{Temperature: 0.8}
	alone := draw([]int64{0}, []Params{plain})
	mixed := draw([]int64{0, 1, 2}, []Params{plain, {Temperature: 1, TopP: 0.9}, {Temperature: 1, TopK: 20}})
	if diff := cmp.Diff(alone, mixed); diff != "" {
		t.Errorf("temperature-only row alone vs with top-p/top-k rows (-alone +mixed):\n%s", diff)
	}
}
