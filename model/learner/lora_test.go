package learner

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// TestGRPOLearnsToyRewardLoRA: the toy-reward learning test with a LoRA
// adapter on the frozen policy instead of full fine-tuning. The base draws
// its weights from N(0, 0.1²) rather than N(0, 0.02²): with the frozen tiny
// tied embeddings of the 0.02 model, the final RMSNorm bounds every logit
// to about ±1, so no adapter on the decoder can make any token likely, while
// full fine-tuning grows the embeddings themselves. Pretrained models have
// logits of the 0.1 model's scale.
func TestGRPOLearnsToyRewardLoRA(t *testing.T) {
	base := torch.Live()
	curve := learnToy(t, toyModelStd(t, 7, 0.1), func(c *TrainerConfig) {
		c.LoRA = lora.Config{Rank: 8, Alpha: 16}
		c.LR = 3e-2 // LoRA trains few weights, from B = 0: a higher rate
		c.Seed = 1
	})
	checkLearned(t, "GRPO with LoRA", curve)
	modeltest.CheckLeaks(t, base)
}

// loraBatch is a fixed on-policy batch for the trainer tests.
func loraBatch(k int) []backend.TrainSample {
	var b []backend.TrainSample
	for i := 0; i < 6; i++ {
		p := []int{200 + i, 17 * (i + k) % 256, 3}
		c := []int{(31*i + 7*k) % 256, (11*i + k) % 256, 5, (i * k) % 256}[:2+(i+k)%3]
		b = append(b, backend.TrainSample{PromptTokenIDs: p, CompletionTokenIDs: c, Advantage: float64(i%3) - 1 + 0.1*float64(k)})
	}
	return b
}

func loraTestConfig() TrainerConfig {
	cfg := DefaultTrainerConfig()
	cfg.Loss.Beta = 0.04
	cfg.LR = 1e-2
	cfg.MicroBatch = 4
	cfg.LoRA = lora.Config{Rank: 4, Alpha: 8, Dropout: 0.1}
	cfg.Seed = 5
	return cfg
}

// TestLoRATrainerFreezesBase: LoRA training changes only the adapter (the
// base weights stay bit for bit, carry no grad and no optimizer state), and
// the KL reference is the base model itself.
func TestLoRATrainerFreezesBase(t *testing.T) {
	live := torch.Live()
	m := toyModel(t, 3)
	defer m.Close()
	frozen, err := model.FrozenCopy(m)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	if _, err := NewTrainer(m, frozen, loraTestConfig(), model.SaveOptions{}); err == nil || !strings.Contains(err.Error(), "adapter off") {
		t.Errorf("a reference model with LoRA: err = %v", err)
	}
	tr, err := NewTrainer(m, nil, loraTestConfig(), model.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Ref != nil || tr.Adapter == nil {
		t.Fatalf("LoRA trainer: Ref %v, Adapter %v", tr.Ref, tr.Adapter)
	}
	if got, want := len(tr.Optimizer().Params()), len(tr.Adapter.Parameters()); got != want {
		t.Errorf("optimizer holds %d tensors, want the adapter's %d", got, want)
	}
	ctx := context.Background()
	for k := 0; k < 3; k++ {
		st, err := tr.TrainStep(ctx, loraBatch(k))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss %+.4f kl %.5f grad %.4f", st.Step, st.Loss, st.KL, st.GradNorm)
		if k > 0 && !(st.KL > 0) {
			t.Errorf("step %d: KL to the base is %v after the adapter moved", st.Step, st.KL)
		}
	}
	fp := frozen.Parameters()
	for i, p := range m.Parameters() {
		a, _ := torch.Bytes(p.Tensor)
		b, _ := torch.Bytes(fp[i].Tensor)
		if string(a) != string(b) {
			t.Errorf("base parameter %s changed", p.Name)
		}
		if torch.RequiresGrad(p.Tensor) {
			t.Errorf("base parameter %s requires grad", p.Name)
		}
	}
	moved := false
	for _, l := range tr.Adapter.Layers() {
		v, _ := torch.Float32s(l.B)
		for _, x := range v {
			moved = moved || x != 0
		}
	}
	if !moved {
		t.Error("every lora_B is still zero after 3 steps")
	}

	// The reference log-probs are the base model's.
	rows := loraBatch(9)
	if err := tr.fillRef(ctx, rows); err != nil {
		t.Fatal(err)
	}
	conts := make([]generate.Continuation, len(rows))
	for i, r := range rows {
		conts[i] = generate.Continuation{Prompt: r.PromptTokenIDs, Completion: r.CompletionTokenIDs}
	}
	want, _, err := generate.LogProbs(ctx, frozen, conts, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	on, _, err := generate.LogProbs(ctx, m, conts, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	differs := false
	for i, r := range rows {
		for j, v := range r.RefLogProbs {
			if v != float64(want[i][j]) {
				t.Fatalf("row %d token %d: reference log-prob %v, base model's %v", i, j, v, want[i][j])
			}
			differs = differs || on[i][j] != want[i][j]
		}
	}
	if !differs {
		t.Error("the policy's log-probs equal the base's: the adapter is not on outside the reference pass")
	}
	tr.Close()
	for _, l := range m.(model.Adaptable).Linears() {
		if *l.Adapter != nil {
			t.Fatalf("%s keeps an adapter after Close", l.Name)
		}
	}
	m.Close()
	frozen.Close()
	modeltest.CheckLeaks(t, live)
}

// TestLoRATrainerExactResume: saving the adapter and the optimizer after
// two steps, then resuming on a fresh copy of the base, gives the same
// adapter bits after two more steps as the run that never stopped (dropout
// on, so the per-step dropout seeds are exercised).
func TestLoRATrainerExactResume(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	adapterBits := func(tr *Trainer) map[string]string {
		out := map[string]string{}
		for _, p := range tr.Adapter.Parameters() {
			b, err := torch.Bytes(p.Tensor)
			if err != nil {
				t.Fatal(err)
			}
			out[p.Name] = string(b)
		}
		return out
	}
	run := func(resume bool) map[string]string {
		m := toyModel(t, 7)
		defer m.Close()
		tr, err := NewTrainer(m, nil, loraTestConfig(), model.SaveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		start := 0
		if resume {
			if err := tr.LoadAdapter(filepath.Join(dir, "policy")); err != nil {
				t.Fatal(err)
			}
			if err := tr.Optimizer().Load(filepath.Join(dir, "opt.safetensors")); err != nil {
				t.Fatal(err)
			}
			start = 2
		}
		for k := start; k < 4; k++ {
			if _, err := tr.TrainStep(ctx, loraBatch(k)); err != nil {
				t.Fatal(err)
			}
			if k == 1 && !resume {
				if _, err := tr.Save(ctx, filepath.Join(dir, "policy")); err != nil {
					t.Fatal(err)
				}
				if err := tr.Optimizer().Save(filepath.Join(dir, "opt.safetensors")); err != nil {
					t.Fatal(err)
				}
			}
		}
		return adapterBits(tr)
	}
	straight := run(false)
	resumed := run(true)
	if len(straight) == 0 || len(straight) != len(resumed) {
		t.Fatalf("%d adapter tensors, resumed %d", len(straight), len(resumed))
	}
	for n, b := range straight {
		if resumed[n] != b {
			t.Errorf("%s: resumed adapter differs from the uninterrupted run", n)
		}
	}
}
