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
