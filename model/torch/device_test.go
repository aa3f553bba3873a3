package torch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestDeviceCheck: the CPU passes CheckDevice; a CUDA device this process
// cannot use fails it with one line that names the device and says why:
// built without CUDA (the CPU build), no device visible, or an index past
// the visible devices. In a CUDA build on a machine without a GPU (make
// test's CUDA subset) cuda:0 is the missing device; on a GPU machine the
// index past the last.
func TestDeviceCheck(t *testing.T) {
	if err := CheckDevice(CPU); err != nil {
		t.Fatalf("CheckDevice(cpu) = %v", err)
	}
	if CUDABuilt() != cudaBuilt {
		t.Fatalf("CUDABuilt() = %v in a build with cudaBuilt = %v: the CUDA hooks say otherwise", CUDABuilt(), cudaBuilt)
	}
	// The CPU build may see the hooks too: the torch wheel's libtorch_cpu
	// loads libtorch_cuda through nvfuser (libnvfuser_codegen.so) when it is
	// there. The CUDA build must.
	if cudaBuilt && CUDARuntimeVersion() == "" {
		t.Errorf("CUDA build: no CUDA runtime version from ATen's CUDA hooks: libtorch_cuda is not loaded")
	}
	devs, err := CUDADevices()
	t.Logf("CUDA built: %v (runtime %q, cuDNN %q); devices %v, err %v", cudaBuilt, CUDARuntimeVersion(), CuDNNVersion(), devs, err)
	if !cudaBuilt && (len(devs) != 0 || err != nil) {
		t.Errorf("CPU build: CUDADevices() = %v, %v; want none and no error", devs, err)
	}
	if cudaBuilt && len(devs) == 0 && err == nil {
		t.Errorf("CUDA build with no device: CUDADevices() gave no reason")
	}
	missing := CUDA(len(devs))
	err = CheckDevice(missing)
	if err == nil {
		t.Fatalf("CheckDevice(%s) passed with %d device(s) visible", DeviceName(missing), len(devs))
	}
	msg := err.Error()
	want := []string{fmt.Sprintf("device cuda:%d: ", len(devs))}
	switch {
	case !cudaBuilt:
		want = append(want, "built without CUDA", "TORCH_CUDA=1 make build")
	case len(devs) == 0:
		want = append(want, "no CUDA device is visible: ")
	default:
		want = append(want, fmt.Sprintf("only %d CUDA device(s) are visible", len(devs)))
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("CheckDevice(%s) = %q, want it to contain %q", DeviceName(missing), msg, w)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("CheckDevice(%s) is not one line: %q", DeviceName(missing), msg)
	}
	if len(devs) == 0 {
		if CUDAInUse() {
			t.Errorf("CUDA is in use with no device visible")
		}
		if _, err := CUDAMemory(CUDA(0), false); err == nil {
			t.Errorf("CUDAMemory(cuda:0) with no device in use: no error")
		}
		if err := Synchronize(CPU); err != nil {
			t.Errorf("Synchronize(cpu) = %v", err)
		}
	}
}

// TestDeviceSeedIsTheCPUGenerators: ManualSeed seeds the CPU generator (a
// seeded draw repeats) without putting CUDA in use.
func TestDeviceSeedIsTheCPUGenerators(t *testing.T) {
	inUse := CUDAInUse()
	draw := func() []float32 {
		s := NewScope()
		defer s.Close()
		ManualSeed(1234)
		v, err := Float32s(s.Randn([]int64{8}, Float32, CPU))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b := draw(), draw()
	if !slices.Equal(a, b) {
		t.Errorf("two draws after ManualSeed(1234) differ: %v, %v", a, b)
	}
	if CUDAInUse() != inUse {
		t.Errorf("ManualSeed put CUDA in use")
	}
}

// TestDeviceName: DeviceName reads back as ParseDevice's input.
func TestDeviceName(t *testing.T) {
	for _, s := range []string{"cpu", "cuda:0", "cuda:3"} {
		d, err := ParseDevice(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := DeviceName(d); got != s {
			t.Errorf("DeviceName(ParseDevice(%q)) = %q", s, got)
		}
	}
}

// TestDeviceMeta: a meta tensor (ToMeta) keeps x's shape and dtype, is
// reported as an error by DeviceOf (gotch's own Device exits the process
// there), and CopyBytesInto, whose raw copy is for CPU tensors only, leaves
// it to the caller's other path (the one a CUDA tensor takes) instead of
// writing through its data pointer.
func TestDeviceMeta(t *testing.T) {
	base := Live()
	s := NewScope()
	x := s.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	m := s.ToMeta(s.Transpose(x, 0, 1))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if sh, err := Shape(m); err != nil || !slices.Equal(sh, []int64{3, 2}) || DTypeOf(m) != Float32 {
		t.Errorf("meta tensor: shape %v (%v), dtype %s; want [3 2] float32", sh, err, DTypeName(DTypeOf(m)))
	}
	if _, err := DeviceOf(m); err == nil || !strings.Contains(err.Error(), "meta") {
		t.Errorf("DeviceOf(meta) = %v, want an error naming meta", err)
	}
	if d, err := DeviceOf(x); err != nil || d != CPU {
		t.Errorf("DeviceOf(cpu tensor) = %v, %v", d, err)
	}
	done, err := CopyBytesInto(s.ToMeta(x), make([]byte, 24), Float32, nil)
	if done || err == nil {
		t.Errorf("CopyBytesInto(meta) = %v, %v; want not done, with the device error", done, err)
	}
	y := s.Add(s.MulScalar(m, 2), m) // ops on meta tensors compute shapes only
	if sh, err := Shape(y); err != nil || !slices.Equal(sh, []int64{3, 2}) || s.Err() != nil {
		t.Errorf("meta op: shape %v, %v, %v", sh, err, s.Err())
	}
	s.Close()
	wantLive(t, base)
}

// TestDeviceParamDType: parameters are bfloat16 on CUDA and float32 on the
// CPU (model.LoadOptions' default dtype).
func TestDeviceParamDType(t *testing.T) {
	if ParamDType(CUDA(0)) != BFloat16 || ParamDType(CUDA(3)) != BFloat16 || ParamDType(CPU) != Float32 {
		t.Errorf("ParamDType: cuda %s, cpu %s", DTypeName(ParamDType(CUDA(0))), DTypeName(ParamDType(CPU)))
	}
}
