package fused_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// TestArgmaxEqualsTorch: the shim's vectorized argmax gives libtorch's
// answer (the first index of the maximum, or of the first NaN) on rows with
// ties, infinities, NaN, a maximum in the unvectorized tail and widths that
// are not a multiple of 8, and falls back to at::argmax for other dtypes
// and layouts.
func TestArgmaxEqualsTorch(t *testing.T) {
	if runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && !fused.ArgmaxVectorized() {
		t.Fatal("this CPU has AVX2 but Argmax does not take its vectorized scan")
	}
	t.Logf("vectorized scan: %v", fused.ArgmaxVectorized())
	base := torch.Live()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, V := range []int64{1, 7, 8, 9, 64, 1001, 151936} {
		var rows [][]float32
		row := func(f func(i int) float32) {
			r := make([]float32, V)
			for i := range r {
				r[i] = f(i)
			}
			rows = append(rows, r)
		}
		row(func(int) float32 { return float32(rng.NormFloat64()) })
		row(func(int) float32 { return float32(rng.IntN(3)) })                      // many ties
		row(func(int) float32 { return float32(math.Inf(-1)) })                     // all −inf
		row(func(i int) float32 { return float32(i) })                              // max last (in the tail)
		row(func(i int) float32 { return float32(-i) })                             // max first
		row(func(i int) float32 { return []float32{0, float32(math.Inf(1))}[i%2] }) // +inf ties
		nan := func(at int) func(i int) float32 {
			return func(i int) float32 {
				if i == at || i == at+5 {
					return float32(math.NaN())
				}
				return float32(rng.NormFloat64())
			}
		}
		row(nan(int(V) / 2))
		row(nan(int(V) - 1))
		B := int64(len(rows))
		s := torch.NewScope()
		x := s.FromFloat32(slices.Concat(rows...), B, V)
		// x itself takes the vectorized scan; other dtypes and strides
		// at::argmax.
		for name, y := range map[string]*torch.Tensor{
			"float32":    x,
			"bfloat16":   s.ToDType(x, torch.BFloat16),
			"transposed": s.Transpose(s.Transpose(x, 0, 1), 0, 1),
			"strided":    s.Narrow(s.Cat([]*torch.Tensor{x, x}, 1), 1, 0, V),
		} {
			got, err := torch.Int64s(fused.Argmax(s, y))
			if err != nil {
				t.Fatal(err)
			}
			want, err := torch.Int64s(s.Argmax(y, -1, false))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("V=%d %s: argmax %v, libtorch %v", V, name, got, want)
			}
		}
		s.Close()
	}
	if n := torch.Live() - base; n != 0 {
		t.Errorf("%d tensors leaked", n)
	}
}
