package llama_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// Tolerance of the fp32 logit parity with transformers (DESIGN §6).
const tol = 1e-4

var golden struct {
	once  sync.Once
	dir   string
	names []string
	err   error
}

// goldens creates the HF reference checkpoints once per test binary.
func goldens(t *testing.T) (string, []string) {
	t.Helper()
	golden.once.Do(func() {
		dir, err := os.MkdirTemp("", "evolm-hf-golden-")
		if err != nil {
			golden.err = err
			return
		}
		golden.dir = dir
		out := testutil.RunPython(t, "hf_make_checkpoints.py", dir)
		golden.err = json.Unmarshal(out, &golden.names)
	})
	if golden.err != nil {
		t.Fatalf("golden checkpoints: %v", golden.err)
	}
	return golden.dir, golden.names
}

func TestMain(m *testing.M) {
	torch.SetNumThreads(1)
	code := m.Run()
	if golden.dir != "" {
		os.RemoveAll(golden.dir)
	}
	os.Exit(code)
}

// refCase is one input of ref.safetensors with the HF logits.
type refCase struct {
	ids, mask, pos []int64
	B, T, V        int64
	logits         []float32
}

func readRefs(t *testing.T, path string) []refCase {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []refCase
	for c := 0; ; c++ {
		info, ok := f.Info(fmt.Sprintf("case%d.logits", c))
		if !ok {
			break
		}
		rc := refCase{B: info.Shape[0], T: info.Shape[1], V: info.Shape[2]}
		rc.ids = i64s(t, f, fmt.Sprintf("case%d.ids", c))
		rc.mask = i64s(t, f, fmt.Sprintf("case%d.mask", c))
		rc.pos = i64s(t, f, fmt.Sprintf("case%d.pos", c))
		b, _ := f.Data(info.Name)
		rc.logits = make([]float32, len(b)/4)
		for i := range rc.logits {
			rc.logits[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		}
		cases = append(cases, rc)
	}
	if len(cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return cases
}

func i64s(t *testing.T, f *safetensors.File, name string) []int64 {
	b, err := f.Data(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(b)/8)
	for i := range out {
		var v uint64
		for k := 0; k < 8; k++ {
			v |= uint64(b[8*i+k]) << (8 * k)
		}
		out[i] = int64(v)
	}
	return out
}

// maxDiff compares logits (B, T, V) at unpadded positions only: HF's values
// at padded query positions are arbitrary.
func maxDiff(rc refCase, got []float32) float64 {
	worst := 0.0
	for b := int64(0); b < rc.B; b++ {
		for t := int64(0); t < rc.T; t++ {
			if rc.mask[b*rc.T+t] == 0 {
				continue
			}
			for v := int64(0); v < rc.V; v++ {
				i := (b*rc.T+t)*rc.V + v
				worst = math.Max(worst, math.Abs(float64(got[i])-float64(rc.logits[i])))
			}
		}
	}
	return worst
}

// forward runs m on a case without a cache and returns logits as floats.
func forward(t *testing.T, m model.CausalLM, rc refCase) []float32 {
	t.Helper()
	s := torch.NewScope()
	defer s.Close()
	logits, err := m.Forward(s, model.Batch{
		IDs:       s.FromInt64(rc.ids, rc.B, rc.T),
		Positions: s.FromInt64(rc.pos, rc.B, rc.T),
		Mask:      s.FromInt64(rc.mask, rc.B, rc.T),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := torch.Float32s(logits)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHFParity(t *testing.T) {
	dir, names := goldens(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			base := torch.Live()
			m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for c, rc := range readRefs(t, filepath.Join(dir, name, "ref.safetensors")) {
				d := maxDiff(rc, forward(t, m, rc))
				t.Logf("%s case%d (B=%d T=%d V=%d): max |logit - HF| = %.3g", name, c, rc.B, rc.T, rc.V, d)
				if d > tol || math.IsNaN(d) {
					t.Errorf("%s case%d: max abs logit error %.3g > %g", name, c, d, tol)
				}
			}
			m.Close()
			if n := torch.Live() - base; n != 0 {
				t.Errorf("%d tensors leaked", n)
			}
		})
	}
}
