package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

func TestModelInitCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny")
	cmd := newModelCmd()
	var stdout bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetArgs([]string{"init", "--arch", "qwen3", "--preset", "tiny", "--seed", "3", "--out", out})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "Qwen3ForCausalLM, 2 layers, hidden 64, vocab 151936") {
		t.Errorf("output %q", stdout.String())
	}
	m, err := model.Load(out, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config().NumKeyValueHeads != 2 || !m.Config().TieWordEmbeddings || m.DType() != torch.Float32 {
		t.Errorf("loaded config %+v", m.Config())
	}
}
