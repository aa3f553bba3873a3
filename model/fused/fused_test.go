package fused_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
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

// TestForwardRefusesGrad: the stack runs its ops below autograd's dispatch
// keys, so with grad on it refuses to run, and with grad off a stack of no
// layers is the final norm.
func TestForwardRefusesGrad(t *testing.T) {
	x := []float32{1, -2, 3, 0.5, 4, 0, -1, 2}
	for _, grad := range []bool{true, false} {
		func() {
			defer torch.SetGrad(grad)()
			s := torch.NewScope()
			defer s.Close()
			w := s.FromFloat32([]float32{1, 2, 0.5, 1}, 4)
			h := s.FromFloat32(x, 1, 2, 4)
			rope := s.Zeros([]int64{1, 1, 2, 4}, torch.Float32, torch.CPU)
			bias := s.Zeros([]int64{1, 1, 2, 2}, torch.Float32, torch.CPU)
			y := fused.Forward(s, fused.Config{NormEps: 1e-6, AttnScale: 0.5}, []*torch.Tensor{w}, h, rope, rope, fused.Mask{Bias: bias}, nil, nil, 0)
			if grad {
				if err := s.Err(); err == nil || !strings.Contains(err.Error(), "inference only (grad is on)") {
					t.Fatalf("grad on: error %v, want the shim's refusal", err)
				}
				return
			}
			got, err := torch.Float32s(y)
			if err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				var ms float64
				for _, v := range x[4*r : 4*r+4] {
					ms += float64(v) * float64(v) / 4
				}
				for i, wi := range []float64{1, 2, 0.5, 1} {
					want := wi * float64(x[4*r+i]) / math.Sqrt(ms+1e-6)
					if d := math.Abs(float64(got[4*r+i]) - want); d > 1e-5 {
						t.Errorf("grad off: y[%d][%d] = %v, want RMSNorm's %v", r, i, got[4*r+i], want)
					}
				}
			}
		}()
	}
}

// TestParallelRowsUseTheIntraOpThreads: the shim's parallel regions (its
// elementwise kernels', the mask's and argmax's) run on libtorch's intra-op
// threads, as many as torch.set_num_threads asks, and a loop of no more
// rows than its grain on one. at::parallel_for would run them serially in
// a file built without -fopenmp, as fused.cc is.
func TestParallelRowsUseTheIntraOpThreads(t *testing.T) {
	runtime.LockOSThread() // the thread count is the OS thread's (OpenMP's ICV)
	defer runtime.UnlockOSThread()
	defer torch.SetNumThreads(torch.NumThreads())
	for _, c := range []struct{ threads, n, grain, want int64 }{
		{2, 1000, 10, 2},
		{2, 10, 10, 1},
		{2, 11, 10, 2},
		{3, 1000, 400, 3},
		{3, 1000, 500, 2},
		{1, 1000, 10, 1},
	} {
		torch.SetNumThreads(int(c.threads))
		if got := fused.ParallelThreads(c.n, c.grain); got != c.want {
			t.Errorf("%d threads, %d rows, grain %d: %d threads took a part, want %d", c.threads, c.n, c.grain, got, c.want)
		}
	}
}

// TestWeightsStamp: the stamp stays while the tensors do, and changes when
// one of them is written in place, marked written (BumpVersion) or
// replaced, or the list changes.
func TestWeightsStamp(t *testing.T) {
	s := torch.NewScope()
	defer s.Close()
	a, b := s.Zeros([]int64{4, 3}, torch.Float32, torch.CPU), s.Zeros([]int64{5}, torch.Float32, torch.CPU)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ws := []*torch.Tensor{a, b}
	before := fused.WeightsStamp(ws)
	if before == 0 {
		t.Fatal("stamp 0 for two ordinary tensors")
	}
	if got := fused.WeightsStamp(ws); got != before {
		t.Fatalf("stamp %x then %x with nothing changed", before, got)
	}
	last := before
	changed := func(what string) {
		t.Helper()
		got := fused.WeightsStamp(ws)
		if got == last || got == 0 {
			t.Errorf("%s: stamp %x, before %x", what, got, last)
		}
		last = got
	}
	s.MulScalar_(b, 2)
	changed("b written in place")
	if err := fused.BumpVersion(a); err != nil {
		t.Fatal(err)
	}
	changed("a marked written")
	ws[1] = s.Zeros([]int64{5}, torch.Float32, torch.CPU)
	changed("b replaced")
	ws = ws[:1]
	changed("one tensor fewer")
	if fused.WeightsStamp(nil) != 0 {
		t.Error("stamp of no tensors is not 0")
	}
}
