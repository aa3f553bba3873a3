package generate

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
)

// refRow is one row of scripts/sampling_reference.py process.
type refRow struct {
	Prompt     []int              `json:"prompt"`
	Output     []int              `json:"output"`
	Repetition float64            `json:"repetition_penalty"`
	Frequency  float64            `json:"frequency_penalty"`
	Presence   float64            `json:"presence_penalty"`
	Bias       map[string]float64 `json:"logit_bias"`
	MinTokens  int                `json:"min_tokens"`
	Stop       []int              `json:"stop"`
	Temp       float64            `json:"temperature"`
	MinP       float64            `json:"min_p"`
}

// TestProcessorsMatchReferences puts random logits through each processor
// (and all of them at once) with adjustFor, sample.Adjusted and
// sample.Probs, and compares the processed logits and the distribution
// with transformers' processors (SequenceBias, RepetitionPenalty,
// MinNewTokensLength, Temperature, MinP) and vLLM's frequency and presence
// formula on the same logits (scripts/sampling_reference.py).
func TestProcessorsMatchReferences(t *testing.T) {
	const V = 64
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := []int{3, 5, 5, 9, 40}
	output := []int{7, 7, 7, 9, 12, 3}
	rows := []refRow{
		{Repetition: 1.3, Temp: 1},
		{Repetition: 0.7, Temp: 1},
		{Frequency: 0.5, Presence: 0.25, Temp: 1},
		{Frequency: -0.4, Presence: 1.5, Temp: 1},
		{Bias: map[string]float64{"4": 5, "7": -100, "63": 2.5}, Temp: 1},
		{MinTokens: 8, Stop: []int{1, 2}, Temp: 1},
		{MinTokens: 6, Stop: []int{1, 2}, Temp: 1}, // the output has reached it: nothing banned
		{MinP: 0.1, Temp: 1},
		{MinP: 0.05, Temp: 0.5},
		{Repetition: 1.2, Frequency: 0.3, Presence: 0.1, Bias: map[string]float64{"9": 1.5, "0": -3}, MinTokens: 10, Stop: []int{2}, Temp: 0.8, MinP: 0.02},
	}
	logits := make([][]float32, len(rows))
	flat := make([]float32, 0, len(rows)*V)
	for i := range rows {
		rows[i].Prompt, rows[i].Output = prompt, output
		logits[i] = make([]float32, V)
		for j := range logits[i] {
			logits[i][j] = float32(rng.NormFloat64() * 3)
		}
		flat = append(flat, logits[i]...)
	}
	in, err := json.Marshal(map[string]any{"logits": logits, "rows": rows})
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Logits [][]*float64 `json:"logits"`
		Probs  [][]float64  `json:"probs"`
	}
	if err := json.Unmarshal(testutil.RunPythonInput(t, "sampling_reference.py", in, "process"), &want); err != nil {
		t.Fatal(err)
	}

	s := torch.NewScope()
	defer s.Close()
	adj := make([]*sample.Adjust, len(rows))
	params := make([]sample.Params, len(rows))
	counts := map[int]int{}
	for _, id := range output {
		counts[id]++
	}
	for i, r := range rows {
		q := &Request{Prompt: prompt, MaxNewTokens: 100, MinNewTokens: r.MinTokens, StopTokens: r.Stop,
			Penalties: Penalties{Repetition: r.Repetition, Frequency: r.Frequency, Presence: r.Presence}}
		for k, v := range r.Bias {
			id, _ := strconv.Atoi(k)
			if q.LogitBias == nil {
				q.LogitBias = map[int]float64{}
			}
			q.LogitBias[id] = v
		}
		if adj[i], err = adjustFor(q, distinct(prompt), nil, V, output, counts, nil); err != nil {
			t.Fatal(err)
		}
		params[i] = sample.Params{Temperature: r.Temp, MinP: r.MinP}
	}
	x := sample.Adjusted(s, s.FromFloat32(flat, int64(len(rows)), V), adj)
	probs, err := sample.Probs(s, x, params)
	if err != nil {
		t.Fatal(err)
	}
	gotX, err := torch.Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	gotP, err := torch.Float32s(probs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		for j := 0; j < V; j++ {
			g, w := float64(gotX[i*V+j]), want.Logits[i][j]
			switch {
			case w == nil && !math.IsInf(g, -1):
				t.Errorf("row %d token %d: logit %v, reference −Inf", i, j, g)
			case w != nil && math.Abs(g-*w) > 1e-5:
				t.Errorf("row %d token %d: logit %v, reference %v", i, j, g, *w)
			}
			if d := math.Abs(float64(gotP[i*V+j]) - want.Probs[i][j]); d > 1e-6 {
				t.Errorf("row %d token %d: probability %v, reference %v", i, j, gotP[i*V+j], want.Probs[i][j])
			}
		}
	}
}

// TestBadWordsAsVLLM: the last token of a bad word is banned exactly when
// the output (not the prompt: vLLM's rule) ends with the rest of it, and a
// one-token word always.
func TestBadWordsAsVLLM(t *testing.T) {
	q := &Request{Prompt: []int{8, 9}, MaxNewTokens: 10, BadWords: [][]int{{5}, {8, 9, 10}, {3, 4}}}
	for _, tc := range []struct {
		output []int
		ban    []int
	}{
		{nil, []int{5}},             // [8 9] is the prompt's end, not the output's
		{[]int{8, 9}, []int{5, 10}}, // the output ends with 8 9
		{[]int{1, 3}, []int{5, 4}},
		{[]int{3, 1}, []int{5}},
	} {
		a, err := adjustFor(q, nil, nil, 16, tc.output, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.ban, a.Ban); diff != "" {
			t.Errorf("output %v: banned (-want +got):\n%s", tc.output, diff)
		}
	}
}

// TestGreedyWithProcessorsMatchesHF: greedy generation with a repetition
// penalty, a logit bias, min_new_tokens with an end token and one-token bad
// words gives transformers' generate(do_sample=False) token for token.
func TestGreedyWithProcessorsMatchesHF(t *testing.T) {
	dir := checkpoint(t, archs[0])
	m := modeltest.Load(t, dir)
	ps := [][]int{{5, 6, 7, 8, 9, 10, 11}, {3, 4}, {100, 101, 102}}
	// Ban and bias tokens the plain greedy run produces, so that they bite.
	plain, err := New(m, nil, Options{}).Generate(context.Background(), []Request{{Prompt: ps[0], MaxNewTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	first := plain[0][0].Tokens
	eos := first[3]
	bias := map[string]float64{strconv.Itoa(first[1]): -4, "17": 6}
	ref := map[string]any{"model": dir, "prompts": ps, "max_new_tokens": 16, "repetition_penalty": 1.4,
		"logit_bias": bias, "min_new_tokens": 5, "eos": []int{eos}, "bad_words": [][]int{{first[0]}}}
	in, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Sequences [][]int }
	if err := json.Unmarshal(testutil.RunPythonInput(t, "sampling_reference.py", in, "greedy"), &want); err != nil {
		t.Fatal(err)
	}
	reqs := make([]Request, len(ps))
	for i, p := range ps {
		reqs[i] = Request{Prompt: p, MaxNewTokens: 16, MinNewTokens: 5, StopTokens: []int{eos},
			Penalties: Penalties{Repetition: 1.4}, LogitBias: map[int]float64{first[1]: -4, 17: 6}, BadWords: [][]int{{first[0]}}}
	}
	out, err := New(m, nil, Options{}).Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]int, len(out))
	for i, o := range out {
		got[i] = o[0].Tokens
	}
	if diff := cmp.Diff(want.Sequences, got); diff != "" {
		t.Errorf("greedy ids with processors (-hf +ours):\n%s", diff)
	}
}
