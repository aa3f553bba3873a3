package backend

import (
	"math"
	"strings"
	"testing"
)

func TestGenerateRequestValidate(t *testing.T) {
	ok := GenerateRequest{ID: "a", Prompt: "hi", Sampling: Sampling{MaxTokens: 4}}
	tests := []struct {
		name    string
		edit    func(r *GenerateRequest)
		wantErr string // "" means valid
	}{
		{"valid prompt", func(r *GenerateRequest) {}, ""},
		{"valid messages", func(r *GenerateRequest) { r.Prompt = ""; r.Messages = []Message{{"user", "x"}} }, ""},
		{"no id", func(r *GenerateRequest) { r.ID = "" }, "empty request id"},
		{"both", func(r *GenerateRequest) { r.Messages = []Message{{"user", "x"}} }, "both prompt and messages"},
		{"neither", func(r *GenerateRequest) { r.Prompt = "" }, "neither prompt nor messages"},
		{"max tokens", func(r *GenerateRequest) { r.MaxTokens = 0 }, "max_tokens = 0"},
		{"temperature", func(r *GenerateRequest) { r.Temperature = -1 }, "temperature"},
		{"temperature nan", func(r *GenerateRequest) { r.Temperature = math.NaN() }, "temperature"},
		{"top p", func(r *GenerateRequest) { r.TopP = 1.5 }, "top_p"},
		{"top k", func(r *GenerateRequest) { r.TopK = -2 }, "top_k"},
		{"n", func(r *GenerateRequest) { r.N = -1 }, "n = -1"},
		{"stop", func(r *GenerateRequest) { r.Stop = []string{""} }, "empty stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.edit(&r)
			err := r.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckIDs(t *testing.T) {
	id := func(r *GenerateRequest) string { return r.ID }
	tests := []struct {
		ids     []string
		wantErr string
	}{
		{[]string{"a", "b"}, ""},
		{[]string{"a", "b", "a"}, `requests 0 and 2 share id "a"`},
		{[]string{"a", ""}, "request 1: empty id"},
	}
	for _, tt := range tests {
		reqs := make([]GenerateRequest, len(tt.ids))
		for i, s := range tt.ids {
			reqs[i].ID = s
		}
		err := CheckIDs(reqs, id)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("CheckIDs(%q) = %q, want %q", tt.ids, got, tt.wantErr)
		}
	}
}

// TestAmongCandidates: log-probs over the vocabulary become log-probs among
// the distinct candidates; a repeated candidate counts once, -Inf (no mass)
// stays -Inf, a row without mass or with a NaN is left alone, and doing it
// twice changes nothing.
func TestAmongCandidates(t *testing.T) {
	lg := math.Log
	inf := math.Inf(-1)
	near := func(a, b []float64) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			switch {
			case math.IsNaN(a[i]) || math.IsNaN(b[i]):
				if math.IsNaN(a[i]) != math.IsNaN(b[i]) {
					return false
				}
			case a[i] != b[i] && !(math.Abs(a[i]-b[i]) <= 1e-12):
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		name      string
		cands     []string
		lps, want []float64
	}{
		{"repeated", []string{"a", "b", "a", "c"}, []float64{lg(.2), lg(.1), lg(.2), lg(.3)}, []float64{lg(.2 / .6), lg(.1 / .6), lg(.2 / .6), lg(.3 / .6)}},
		{"no mass on one", []string{" yes", " no"}, []float64{lg(.01), inf}, []float64{0, inf}},
		{"no mass", []string{" yes", " no"}, []float64{inf, inf}, []float64{inf, inf}},
		{"NaN", []string{" yes", " no"}, []float64{math.NaN(), lg(.5)}, []float64{math.NaN(), lg(.5)}},
		{"NaN in a repeat", []string{" yes", " no", " yes"}, []float64{lg(.2), lg(.5), math.NaN()}, []float64{lg(.2), lg(.5), math.NaN()}},
		{"+Inf", []string{" yes", " no"}, []float64{math.Inf(1), lg(.5)}, []float64{math.Inf(1), lg(.5)}},
	} {
		got := append([]float64(nil), tc.lps...)
		AmongCandidates(tc.cands, got)
		if !near(got, tc.want) {
			t.Errorf("%s: AmongCandidates(%v) = %v, want %v", tc.name, tc.lps, got, tc.want)
		}
		again := append([]float64(nil), got...)
		AmongCandidates(tc.cands, again)
		if !near(again, got) {
			t.Errorf("%s: twice = %v, once %v", tc.name, again, got)
		}
	}
	ids := []int{7, 9, 7}
	got := []float64{lg(.25), lg(.25), lg(.25)}
	AmongCandidates(ids, got)
	if want := []float64{lg(.5), lg(.5), lg(.5)}; !near(got, want) {
		t.Errorf("by token id: %v, want %v", got, want)
	}
}
