package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/model/torch"
)

// known is the test distribution over a 5-token vocabulary.
var known = []float64{0.5, 0.2, 0.15, 0.1, 0.05}

func logitsOf(s *torch.Scope, t *testing.T, rows int, p []float64) *torch.Tensor {
	t.Helper()
	data := make([]float32, 0, rows*len(p))
	for r := 0; r < rows; r++ {
		for _, q := range p {
			data = append(data, float32(math.Log(q))+3) // an offset softmax removes
		}
	}
	x := s.FromFloat32(data, int64(rows), int64(len(p)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return x
}

// expect computes the processed distribution in float64, independently of
// the tensor code: temperature, top-k, renormalise, top-p, renormalise.
func expect(p []float64, ps Params) []float64 {
	out := make([]float64, len(p))
	if ps.Greedy() {
		best := 0
		for i := range p {
			if p[i] > p[best] {
				best = i
			}
		}
		out[best] = 1
		return out
	}
	// known is sorted descending, so the vocabulary order is the sorted order.
	sum := 0.0
	for i, q := range p {
		out[i] = math.Pow(q, 1/ps.Temperature)
		if ps.TopK > 0 && i >= ps.TopK {
			out[i] = 0
		}
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	if ps.TopP > 0 && ps.TopP < 1 {
		before := 0.0
		for i := range out {
			if before >= ps.TopP {
				before += out[i]
				out[i] = 0
				continue
			}
			before += out[i]
		}
		sum = 0
		for _, q := range out {
			sum += q
		}
		for i := range out {
			out[i] /= sum
		}
	}
	return out
}

func TestProbsKnownDistribution(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		kept []int // the exact kept set, stated by hand
	}{
		{"greedy", Params{Temperature: 0}, []int{0}},
		{"temperature only", Params{Temperature: 1}, []int{0, 1, 2, 3, 4}},
		{"top-k 2", Params{Temperature: 1, TopK: 2}, []int{0, 1}},
		{"top-k 1", Params{Temperature: 1, TopK: 1}, []int{0}},
		{"top-k at vocab size is off", Params{Temperature: 1, TopK: 5}, []int{0, 1, 2, 3, 4}},
		{"top-k above vocab size is off", Params{Temperature: 1, TopK: 50}, []int{0, 1, 2, 3, 4}},
		{"top-p 0.45 keeps the first token", Params{Temperature: 1, TopP: 0.45}, []int{0}},
		{"top-p 0.01 still keeps one token", Params{Temperature: 1, TopP: 0.01}, []int{0}},
		{"top-p 0.55", Params{Temperature: 1, TopP: 0.55}, []int{0, 1}},
		{"top-p 0.9", Params{Temperature: 1, TopP: 0.9}, []int{0, 1, 2, 3}},
		{"top-p 1 is off", Params{Temperature: 1, TopP: 1}, []int{0, 1, 2, 3, 4}},
		// Top-p after top-k sees the renormalised top-3 mass .588/.235/.176,
		// so 0.8 keeps two tokens (without renormalising it would keep three).
		{"top-k 3 then top-p 0.8", Params{Temperature: 1, TopK: 3, TopP: 0.8}, []int{0, 1}},
		// T=2 flattens to .340/.215/.186/.152/.107: 0.6 needs three tokens.
		{"temperature 2 then top-p 0.6", Params{Temperature: 2, TopP: 0.6}, []int{0, 1, 2}},
		// T=0.5 sharpens to .714/.114/.064/.029/.007: 0.8 needs two.
		{"temperature 0.5 then top-p 0.8", Params{Temperature: 0.5, TopP: 0.8}, []int{0, 1}},
	}
	s := torch.NewScope()
	defer s.Close()
	params := make([]Params, len(tests))
	for i, tc := range tests {
		params[i] = tc.p
	}
	// All cases in one batch: each row must come out as if alone.
	probs, err := Probs(s, logitsOf(s, t, len(tests), known), params)
	if err != nil {
		t.Fatal(err)
	}
	got, err := torch.Float32s(probs)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row := got[i*5 : i*5+5]
			var kept []int
			for j, q := range row {
				if q != 0 {
					kept = append(kept, j)
				}
			}
			if diff := cmp.Diff(tc.kept, kept); diff != "" {
				t.Errorf("kept set (-want +got):\n%s", diff)
			}
			gotf := make([]float64, 5)
			for j, q := range row {
				gotf[j] = float64(q)
			}
			if diff := cmp.Diff(expect(known, tc.p), gotf, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
				t.Errorf("probs (-want +got):\n%s", diff)
			}
		})
	}
}

func randomLogits(s *torch.Scope, t *testing.T, b, v int, seed uint64) (*torch.Tensor, []float32) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	data := make([]float32, b*v)
	for i := range data {
		data[i] = float32(r.NormFloat64() * 2)
	}
	x := s.FromFloat32(data, int64(b), int64(v))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return x, data
}

func TestTemperatureZeroIsArgmaxWithRawLogProbs(t *testing.T) {
	const b, v = 6, 50
	s := torch.NewScope()
	defer s.Close()
	x, data := randomLogits(s, t, b, v, 7)
	rows := make([]Row, b)
	for i := range rows {
		// top-k/top-p must not matter when greedy
		rows[i] = Row{Params: Params{Temperature: 0, TopK: i, TopP: 0.1 * float64(i)}}
	}
	res, err := Sample(s, x, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, b)
	wantLP := make([]float64, b)
	for i := 0; i < b; i++ {
		row := data[i*v : (i+1)*v]
		lse := 0.0
		for j, z := range row {
			if z > row[want[i]] {
				want[i] = int64(j)
			}
			lse += math.Exp(float64(z))
		}
		wantLP[i] = float64(row[want[i]]) - math.Log(lse)
	}
	if diff := cmp.Diff(want, res.Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	gotLP := make([]float64, b)
	for i, q := range res.LogProbs {
		gotLP[i] = float64(q)
	}
	if diff := cmp.Diff(wantLP, gotLP, cmpopts.EquateApprox(0, 1e-5)); diff != "" {
		t.Errorf("log-probs (-want +got):\n%s", diff)
	}
}

// TestFrequencies samples 20 000 tokens per case with fixed seeds and bounds
// Pearson's chi-square statistic against the expected distribution at the
// 0.999 quantile (df ≤ 4: 18.47), so the test is deterministic yet fails for
// any wrong kept set or weighting. Removed tokens must never be drawn.
func TestFrequencies(t *testing.T) {
	const rows, steps = 200, 100
	tests := []struct {
		name string
		p    Params
	}{
		{"plain", Params{Temperature: 1}},
		{"temperature 2", Params{Temperature: 2}},
		{"top-p 0.9", Params{Temperature: 1, TopP: 0.9}},
		{"top-k 3", Params{Temperature: 1, TopK: 3}},
		{"top-k 4 top-p 0.8", Params{Temperature: 1, TopK: 4, TopP: 0.8}},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := torch.NewScope()
			defer s.Close()
			x := logitsOf(s, t, rows, known)
			rs := make([]Row, rows)
			for i := range rs {
				rs[i] = Row{Params: tc.p, RNG: NewRNG(uint64(1000*ti + i))}
			}
			counts := make([]float64, len(known))
			for st := 0; st < steps; st++ {
				res, err := Sample(s, x, rs)
				if err != nil {
					t.Fatal(err)
				}
				for _, tok := range res.Tokens {
					counts[tok]++
				}
			}
			want := expect(known, tc.p)
			chi := 0.0
			for j, q := range want {
				if q == 0 {
					if counts[j] != 0 {
						t.Errorf("token %d is filtered out but was drawn %v times", j, counts[j])
					}
					continue
				}
				e := q * rows * steps
				chi += (counts[j] - e) * (counts[j] - e) / e
			}
			t.Logf("chi-square %.2f, counts %v", chi, counts)
			if chi > 18.47 {
				t.Errorf("chi-square %.2f > 18.47: counts %v, want probs %v", chi, counts, want)
			}
		})
	}
}

// TestSeedDeterminismAndBatchInvariance: a row's tokens depend only on its
// seed, params and logits — not on the other rows of the batch.
func TestSeedDeterminismAndBatchInvariance(t *testing.T) {
	const v, steps = 40, 30
	s := torch.NewScope()
	defer s.Close()
	all, _ := randomLogits(s, t, 4, v, 3)
	params := []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 1.3, TopK: 10, TopP: 0.95},
		{Temperature: 0},
	}
	run := func(idx []int64, seeds []uint64) [][]int64 {
		x := s.IndexSelect(all, 0, s.FromInt64(idx, int64(len(idx))))
		rs := make([]Row, len(idx))
		for i, r := range idx {
			rs[i] = Row{Params: params[r], RNG: NewRNG(seeds[i])}
		}
		out := make([][]int64, len(idx))
		for st := 0; st < steps; st++ {
			res, err := Sample(s, x, rs)
			if err != nil {
				t.Fatal(err)
			}
			for i, tok := range res.Tokens {
				out[i] = append(out[i], tok)
			}
		}
		return out
	}
	batch := run([]int64{0, 1, 2, 3}, []uint64{11, 12, 13, 14})
	if diff := cmp.Diff(batch, run([]int64{0, 1, 2, 3}, []uint64{11, 12, 13, 14})); diff != "" {
		t.Errorf("same seeds, different tokens (-first +second):\n%s", diff)
	}
	for r := 0; r < 4; r++ {
		alone := run([]int64{int64(r)}, []uint64{uint64(11 + r)})
		if diff := cmp.Diff(batch[r], alone[0]); diff != "" {
			t.Errorf("row %d in a batch vs alone (-batch +alone):\n%s", r, diff)
		}
	}
	// Reordered batch with the rows' own seeds.
	rev := run([]int64{3, 2, 1, 0}, []uint64{14, 13, 12, 11})
	for r := 0; r < 4; r++ {
		if diff := cmp.Diff(batch[r], rev[3-r]); diff != "" {
			t.Errorf("row %d reordered (-batch +reordered):\n%s", r, diff)
		}
	}
	other := run([]int64{0}, []uint64{99})
	if cmp.Equal(batch[0], other[0]) {
		t.Errorf("seeds 11 and 99 gave the same %d tokens", steps)
	}
}

func TestSampleErrors(t *testing.T) {
	s := torch.NewScope()
	defer s.Close()
	x := logitsOf(s, t, 2, known)
	tests := []struct {
		name string
		rows []Row
	}{
		{"row count", []Row{{Params: Params{}}}},
		{"negative temperature", []Row{{Params: Params{Temperature: -1}}, {}}},
		{"top-p above 1", []Row{{Params: Params{TopP: 1.5}}, {}}},
		{"sampling without rng", []Row{{Params: Params{Temperature: 1}}, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Sample(s, x, tc.rows); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestNoTensorLeak(t *testing.T) {
	base := torch.Live()
	func() {
		s := torch.NewScope()
		defer s.Close()
		x, _ := randomLogits(s, t, 3, 30, 1)
		rs := []Row{{Params: Params{Temperature: 1}, RNG: NewRNG(1)}, {Params: Params{Temperature: 1, TopP: .5}, RNG: NewRNG(2)}, {Params: Params{Temperature: 1, TopK: 3}, RNG: NewRNG(3)}}
		inner := torch.Live()
		for i := 0; i < 100; i++ {
			if _, err := Sample(s, x, rs); err != nil {
				t.Fatal(err)
			}
			if _, err := Probs(s, x, []Params{rs[0].Params, rs[1].Params, rs[2].Params}); err != nil {
				t.Fatal(err)
			}
		}
		if got := torch.Live() - inner; got != 100 { // the 100 Probs results, owned by s
			t.Errorf("live tensors grew by %d over 100 calls, want 100 (Probs results only)", got)
		}
	}()
	if got := torch.Live(); got != base {
		t.Errorf("live tensors %d after closing the scope, want %d", got, base)
	}
}

// TestNucleusPrefixAndFullSort: top-p rows whose nucleus lies in the top
// nucleusK tokens take the prefix path, the others a full sort; both must
// equal the float64 reference (sort, softmax, keep while the mass before a
// token is < p), whatever else is in the batch.
func TestNucleusPrefixAndFullSort(t *testing.T) {
	const v = 3000
	r := rand.New(rand.NewPCG(9, 9))
	scales := []float64{6, 0.05} // peaked: small nucleus; flat: nucleus ≫ nucleusK
	data := make([]float32, 0, 2*v)
	for _, sc := range scales {
		for j := 0; j < v; j++ {
			data = append(data, float32(r.NormFloat64()*sc))
		}
	}
	ps := []Params{{Temperature: 1, TopP: 0.9}, {Temperature: 0.8, TopP: 0.9}}
	s := torch.NewScope()
	defer s.Close()
	x := s.FromFloat32(data, 2, v)
	gs, err := plan(s, x, ps, v)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[kind][]int64{kindNucleus: {0}, kindSorted: {1}}, gs); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	want := func(row []float32, p Params) []float64 {
		z := make([]float64, len(row))
		mx := math.Inf(-1)
		for j, l := range row {
			z[j] = float64(l) / p.Temperature
			mx = math.Max(mx, z[j])
		}
		sum := 0.0
		for j := range z {
			z[j] = math.Exp(z[j] - mx)
			sum += z[j]
		}
		order := make([]int, len(z))
		for j := range order {
			order[j] = j
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(z[b], z[a]) })
		out := make([]float64, len(z))
		before, kept := 0.0, 0.0
		for _, j := range order {
			if before < p.TopP {
				out[j] = z[j] / sum
				kept += out[j]
			}
			before += z[j] / sum
		}
		for j := range out {
			out[j] /= kept
		}
		return out
	}
	batch, err := Probs(s, x, ps)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := torch.Float32s(batch)
	for i, p := range ps {
		alone, err := Probs(s, s.Narrow(x, 0, int64(i), 1), []Params{p})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := torch.Float32s(alone)
		if diff := cmp.Diff(a, got[i*v:(i+1)*v]); diff != "" {
			t.Errorf("row %d alone vs in the batch (-alone +batch):\n%s", i, diff)
		}
		w := want(data[i*v:(i+1)*v], p)
		nw, ng := 0, 0
		for j := range w {
			if w[j] > 0 {
				nw++
			}
			if got[i*v+j] > 0 {
				ng++
			}
			if (w[j] > 0) != (got[i*v+j] > 0) || math.Abs(w[j]-float64(got[i*v+j])) > 1e-6 {
				t.Errorf("row %d token %d: prob %g, want %g", i, j, got[i*v+j], w[j])
				break
			}
		}
		t.Logf("row %d (scale %v): nucleus of %d tokens", i, scales[i], ng)
		if nw != ng {
			t.Errorf("row %d: kept %d tokens, want %d", i, ng, nw)
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
