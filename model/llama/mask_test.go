package llama

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// TestAttnBiasEqualsOps: the shim's one-pass bias (fused.AttnBias, what
// eager attention on the CPU reads) is bit for bit the bias maskOps builds
// with tensor ops (what it is on other devices), with its shape: causal
// alone, with padding anywhere, with branches after a trunk and tags in any
// order, with keys cached before the pass, one row and several.
func TestAttnBiasEqualsOps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, B := range []int64{1, 3} {
		for _, T := range []int64{1, 7, 130} {
			for _, past := range []int64{0, 5} {
				for _, withPad := range []bool{false, true} {
					for _, brKind := range []string{"none", "trunk then branches", "any order"} {
						name := fmt.Sprintf("B%d T%d past%d pad %v branches %s", B, T, past, withPad, brKind)
						s := torch.NewScope()
						var pad, br *torch.Tensor
						if withPad {
							p := make([]int64, B*(past+T))
							for i := range p {
								p[i] = int64(r.IntN(4)) // 0 (a padding key) one time in four
							}
							pad = s.FromInt64(p, B, past+T)
						}
						switch brKind {
						case "trunk then branches":
							b := make([]int64, B*T)
							for row := range B {
								trunk := r.Int64N(T + 1)
								for i := trunk; i < T; i++ {
									b[row*T+i] = 1 + (i-trunk)*3/max(T-trunk, 1)
								}
							}
							br = s.FromInt64(b, B, T)
						case "any order":
							b := make([]int64, B*T)
							for i := range b {
								b[i] = int64(r.IntN(4))
							}
							br = s.FromInt64(b, B, T)
						}
						ops := maskOps(s, torch.CPU, pad, br, B, T, past, true)
						one := fused.AttnBias(s, B, T, past, pad, br)
						if err := s.Err(); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						wantShape, want := shapeValues(t, ops.bias)
						gotShape, got := shapeValues(t, one)
						if !slices.Equal(gotShape, wantShape) {
							t.Fatalf("%s: shape %v, the ops' %v", name, gotShape, wantShape)
						}
						blocked := 0
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s: element %d is %g, the ops' %g", name, i, got[i], want[i])
							}
							if want[i] != 0 {
								blocked++
							}
						}
						if blocked == 0 && T > 1 {
							t.Fatalf("%s: nothing blocked", name)
						}
						s.Close()
					}
				}
			}
		}
	}
}

// shapeValues returns x's shape and float32 values.
func shapeValues(t *testing.T, x *torch.Tensor) ([]int64, []float32) {
	t.Helper()
	sh, err := torch.Shape(x)
	if err != nil {
		t.Fatal(err)
	}
	v, err := torch.Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	return sh, v
}

// TestAttnBiasRefusesBadShapes: a mask or branches of the wrong shape is
// an error naming what was expected, not a read past the tensor.
func TestAttnBiasRefusesBadShapes(t *testing.T) {
	s := torch.NewScope()
	defer s.Close()
	fused.AttnBias(s, 2, 4, 1, s.FromInt64(make([]int64, 8), 2, 4), nil)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "(2, 5)") {
		t.Fatalf("mask of (2, 4) for 5 keys: err = %v, want one naming (2, 5)", err)
	}
	s2 := torch.NewScope()
	defer s2.Close()
	fused.AttnBias(s2, 2, 4, 0, nil, s2.FromInt64(make([]int64, 4), 1, 4))
	if err := s2.Err(); err == nil || !strings.Contains(err.Error(), "(2, 4)") {
		t.Fatalf("branches of (1, 4) for 2 rows: err = %v, want one naming (2, 4)", err)
	}
}

// BenchmarkAttnBias times the two ways to build the bias of a packed judge
// pass (a 358-token trunk and 4 branches of 32; docs/engine.md, "The
// attention mask"):
//
//	go test -run '^$' -bench AttnBias ./model/llama
func BenchmarkAttnBias(b *testing.B) {
	const trunk, tails, tail = 358, 4, 32
	T := int64(trunk + tails*tail)
	br := make([]int64, T)
	for k := range tails {
		for j := range tail {
			br[trunk+k*tail+j] = int64(k + 1)
		}
	}
	s := torch.NewScope()
	defer s.Close()
	branches := s.FromInt64(br, 1, T)
	for _, c := range []struct {
		name string
		f    func(s *torch.Scope) *torch.Tensor
	}{
		{"ops", func(s *torch.Scope) *torch.Tensor { return maskOps(s, torch.CPU, nil, branches, 1, T, 0, true).bias }},
		{"shim", func(s *torch.Scope) *torch.Tensor { return fused.AttnBias(s, 1, T, 0, nil, branches) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				ls := s.Child()
				c.f(ls)
				if err := ls.Err(); err != nil {
					b.Fatal(err)
				}
				ls.Close()
			}
		})
	}
}
