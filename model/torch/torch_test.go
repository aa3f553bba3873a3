package torch

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScopeDropsAndCounts(t *testing.T) {
	base := Live()
	s := NewScope()
	x := s.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	y := s.MulScalar(s.Add(x, x), 0.5) // (2, 3)
	kept := s.Keep(s.SumDim(y, []int64{1}, false))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := Live() - base; got != 4 {
		t.Errorf("live inside scope = %d, want 4", got)
	}
	s.Close()
	if got := Live() - base; got != 1 {
		t.Errorf("live after Close = %d, want 1 (the kept sum)", got)
	}
	got, err := Float32s(kept)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{6, 15}, got); diff != "" {
		t.Errorf("row sums (-want +got):\n%s", diff)
	}
	Drop(kept)
	Drop(kept) // a second drop is a no-op
	if got := Live() - base; got != 0 {
		t.Errorf("live after Drop = %d, want 0", got)
	}
}

func TestStickyError(t *testing.T) {
	base := Live()
	s := NewScope()
	a := s.Zeros([]int64{2, 3}, Float32, CPU)
	b := s.Zeros([]int64{4, 5}, Float32, CPU)
	c := s.Matmul(a, b) // shape mismatch
	d := s.Add(c, a)    // skipped
	if c != nil || d != nil {
		t.Errorf("ops after a failure returned tensors")
	}
	err := s.Err()
	if err == nil || !strings.Contains(err.Error(), "torch Matmul") || strings.Contains(err.Error(), "goroutine") {
		t.Errorf("error = %v, want a clean 'torch Matmul: …' error", err)
	}
	child := s.Child()
	if child.Err() == nil {
		t.Errorf("child of a failed scope has no error")
	}
	child.Close()
	s.Close()
	wantLive(t, base)

	s2 := NewScope()
	defer s2.Close()
	ch := s2.Child()
	ch.Failf("boom")
	ch.Close()
	if s2.Err() == nil {
		t.Errorf("child failure did not reach the parent")
	}
}

func TestMoveTo(t *testing.T) {
	base := Live()
	s := NewScope()
	ch := s.Child()
	x := ch.MoveTo(s, ch.Ones([]int64{3}, Float32, CPU))
	ch.Close()
	v, err := Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{1, 1, 1}, v); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	s.Close()
	wantLive(t, base)
}

func TestGradModeRestored(t *testing.T) {
	restore := SetGrad(true)
	defer restore()
	if !GradEnabled() {
		t.Fatal("grad not enabled")
	}
	if err := NoGrad(func() error {
		if GradEnabled() {
			t.Errorf("grad enabled inside NoGrad")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !GradEnabled() {
		t.Errorf("grad mode not restored after NoGrad")
	}
}

func TestBackwardAndGrad(t *testing.T) {
	base := Live()
	defer SetGrad(true)()
	s := NewScope()
	w := s.FromFloat32([]float32{1, 2, 3}, 3)
	if err := SetRequiresGrad(w, true); err != nil {
		t.Fatal(err)
	}
	loss := s.Sum(s.Square(w)) // d/dw = 2w
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if err := Backward(loss); err != nil {
		t.Fatal(err)
	}
	g, err := Float32s(s.Grad(w))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{2, 4, 6}, g); diff != "" {
		t.Errorf("grad (-want +got):\n%s", diff)
	}
	if err := ZeroGrad(w); err != nil {
		t.Fatal(err)
	}
	g, _ = Float32s(s.Grad(w))
	if diff := cmp.Diff([]float32{0, 0, 0}, g); diff != "" {
		t.Errorf("grad after ZeroGrad (-want +got):\n%s", diff)
	}
	s.Close()
	wantLive(t, base)
}

func TestManualSeed(t *testing.T) {
	s := NewScope()
	defer s.Close()
	ManualSeed(7)
	a, _ := Float32s(s.Randn([]int64{5}, Float32, CPU))
	ManualSeed(7)
	b, _ := Float32s(s.Randn([]int64{5}, Float32, CPU))
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, different draws (-first +second):\n%s", diff)
	}
	ManualSeed(8)
	c, _ := Float32s(s.Randn([]int64{5}, Float32, CPU))
	if cmp.Equal(a, c) {
		t.Errorf("different seeds gave the same draws")
	}
}

func TestConversions(t *testing.T) {
	s := NewScope()
	defer s.Close()
	tests := []struct {
		name  string
		x     *Tensor
		want  []int64
		shape []int64
	}{
		{"int64", s.FromInt64([]int64{1, -2, 3, 4}, 2, 2), []int64{1, -2, 3, 4}, []int64{2, 2}},
		{"transposed", s.Transpose(s.FromInt64([]int64{1, 2, 3, 4, 5, 6}, 2, 3), 0, 1), []int64{1, 4, 2, 5, 3, 6}, []int64{3, 2}},
		{"bf16 to int", s.ToDType(s.FromFloat32([]float32{1.5, 2}, 2), BFloat16), []int64{1, 2}, []int64{2}},
		{"scalar", s.FromInt64([]int64{9}), []int64{9}, nil},
	}
	for _, tc := range tests {
		got, err := Int64s(tc.x)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s values (-want +got):\n%s", tc.name, diff)
		}
		sh, _ := Shape(tc.x)
		if diff := cmp.Diff(tc.shape, sh); diff != "" && !(len(tc.shape) == 0 && len(sh) == 0) {
			t.Errorf("%s shape (-want +got):\n%s", tc.name, diff)
		}
	}
	b, err := Bytes(s.FromFloat32([]float32{1}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]byte{0, 0, 0x80, 0x3f}, b); diff != "" {
		t.Errorf("Bytes (-want +got):\n%s", diff)
	}
	if s.FromBytes([]byte{1, 2, 3}, []int64{2}, Float32) != nil || s.Err() == nil {
		t.Errorf("FromBytes with the wrong length did not fail")
	}
}

func TestParseDType(t *testing.T) {
	for in, want := range map[string]DType{"float32": Float32, "bfloat16": BFloat16, "torch.float16": Float16, "bf16": BFloat16} {
		got, err := ParseDType(in)
		if err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseDType("float8"); err == nil {
		t.Errorf("ParseDType(float8) did not fail")
	}
}

// TestPanicUnwindClosesChildren: a panic that skips the Close of child
// scopes (as one inside a gotch call does) leaves nothing behind once the
// root scope's deferred Close runs.
func TestPanicUnwindClosesChildren(t *testing.T) {
	base := Live()
	func() {
		defer func() { _ = recover() }()
		s := NewScope()
		defer s.Close()
		s.FromFloat32([]float32{1}, 1)
		layer := s.Child()
		layer.FromFloat32([]float32{2}, 1)
		inner := layer.Child()
		inner.FromFloat32([]float32{3}, 1)
		done := s.Child()
		done.FromFloat32([]float32{4}, 1)
		done.Close()
		panic("allocation failed")
	}()
	if got := Live() - base; got != 0 {
		t.Errorf("live after the unwind = %d, want 0", got)
	}
}

// TestCleanErrDropsTheCppStack: libtorch's errors end in its C++ stack; the
// message keeps the first lines only, an allocation failure's included.
func TestCleanErrDropsTheCppStack(t *testing.T) {
	for raw, want := range map[string]string{
		"Libtorch API Error: index out of range in self\nException raised from operator() at ../aten/src/ATen/native/TensorAdvancedIndexing.cpp:1189 (most recent call first):\nframe #0: c10::Error::Error()":                                                                                                                                                                                "torch Embedding: index out of range in self",
		"Libtorch API Error: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 252821504 bytes. Error code 12 (Cannot allocate memory)\nframe #0: c10::ThrowEnforceNotMet(char const*, int, char const*, std::string const&, void const*) + 0x55 (0x7f2ba3c084b5 in libc10.so)\nframe #1: c10::alloc_cpu(unsigned long) + 0x311": "torch Embedding: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 252821504 bytes. Error code 12 (Cannot allocate memory)",
	} {
		if got := cleanErr("Embedding", errString(raw)).Error(); got != want {
			t.Errorf("cleanErr(%.40q…) = %q\nwant %q", raw, got, want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestCopyBytesInto: bytes go straight into a contiguous CPU tensor of
// their dtype; a transposed view or another dtype is left alone (false).
func TestCopyBytesInto(t *testing.T) {
	s := NewScope()
	defer s.Close()
	dst := s.Zeros([]int64{2, 3}, Float32, CPU)
	want := []float32{1, 2, 3, 4, 5, 6}
	if ok, err := CopyBytesInto(dst, sliceBytes(want), Float32, nil); err != nil || !ok {
		t.Fatalf("contiguous float32: ok=%v err=%v, want a copy", ok, err)
	}
	got, err := Float32s(dst)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("copied values (-want +got):\n%s", diff)
	}
	for name, x := range map[string]*Tensor{
		"transposed": s.Transpose(dst, 0, 1),
		"bfloat16":   s.Zeros([]int64{2, 3}, BFloat16, CPU),
		"other size": s.Zeros([]int64{2, 2}, Float32, CPU),
	} {
		if ok, err := CopyBytesInto(x, sliceBytes(want), Float32, nil); err != nil || ok {
			t.Errorf("%s: ok=%v err=%v, want false and no error", name, ok, err)
		}
	}
}

// wantLive fails t unless the live-tensor count is back to base.
func wantLive(t *testing.T, base int64) {
	t.Helper()
	if got := Live() - base; got != 0 {
		t.Errorf("live = %d, want 0", got)
	}
}

// TestLinearCompactsItsInput: Linear hands libtorch an input with the
// strides of a fresh tensor (matmul's slow path takes the last position
// narrowed from (B, T, C) otherwise; see compact), and its values are those
// of the narrowed input.
func TestLinearCompactsItsInput(t *testing.T) {
	base := Live()
	s := NewScope()
	const T, C, O = 5, 4, 3
	w := s.ToDType(s.Arange(0, O*C, Float32, CPU), BFloat16)
	w = s.View(s.DivScalar(w, 7), O, C)
	for _, B := range []int64{1, 3} {
		h := s.ToDType(s.View(s.DivScalar(s.Arange(0, B*T*C, Float32, CPU), 11), B, T, C), BFloat16)
		last := s.Narrow(h, 1, T-1, 1) // (B, 1, C), strides (T*C, C, 1)
		st, err := last.Stride()
		if err != nil {
			t.Fatal(err)
		}
		if st[0] != T*C {
			t.Fatalf("B=%d: narrowed strides %v, want a first stride of %d for this test", B, st, T*C)
		}
		got, err := s.compact(last).Stride()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int64{C, C, 1}, got); diff != "" {
			t.Errorf("B=%d: compact strides (-want +got):\n%s", B, diff)
		}
		y, err := Float32s(s.Float32(s.Linear(last, w, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ref, err := Float32s(s.Float32(s.Linear(s.Reshape(last, B, C), w, nil))) // 2-D: not compacted
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ref, y); diff != "" {
			t.Errorf("B=%d: Linear of the narrowed input (-2-D +3-D):\n%s", B, diff)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	wantLive(t, base)
}
