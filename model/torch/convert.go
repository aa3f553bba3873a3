package torch

import (
	"fmt"
	"unsafe"

	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// Shape is x's shape.
func Shape(x *Tensor) ([]int64, error) {
	defer lockThread()()
	if x == nil {
		return nil, fmt.Errorf("torch Shape: nil tensor")
	}
	sh, err := x.Size()
	if err != nil {
		return nil, cleanErr("Shape", err)
	}
	return sh, nil
}

// Numel is the number of elements of a shape.
func Numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// DTypeOf is x's dtype.
func DTypeOf(x *Tensor) DType { return x.DType() }

// DeviceOf is x's device: the CPU or a CUDA device; another (a meta
// tensor of a test, ToMeta) is an error.
func DeviceOf(x *Tensor) (Device, error) {
	if x == nil {
		return CPU, fmt.Errorf("torch Device: nil tensor")
	}
	return deviceOf(x)
}

// FromBytes makes a tensor of dtype and shape on the CPU from raw
// little-endian bytes (copied once by libtorch). data may be any memory,
// including an mmap'd file.
func (s *Scope) FromBytes(data []byte, shape []int64, dtype DType) *Tensor {
	if !s.ok("FromBytes") {
		return nil
	}
	want := Numel(shape) * int64(ElemSize(dtype))
	if int64(len(data)) != want {
		s.Failf("torch FromBytes: %d bytes for shape %v %s, want %d", len(data), shape, DTypeName(dtype), want)
		return nil
	}
	if want == 0 || len(shape) == 0 {
		// at_tensor_of_data needs a non-empty shape and data pointer.
		if want == 0 {
			return s.Zeros(shape, dtype, CPU)
		}
		return s.Reshape(s.FromBytes(data, []int64{1}, dtype))
	}
	dims := append([]int64(nil), shape...)
	c := lib.AtTensorOfData(unsafe.Pointer(&data[0]), dims, uint(len(dims)), uint(ElemSize(dtype)), int(dtype.CKind()))
	if err := torchErr("FromBytes"); err != nil {
		s.Fail(err)
		return nil
	}
	return s.track("FromBytes", ts.New(c), nil)
}

// CopyBytesInto copies raw little-endian bytes of dtype straight into dst's
// memory when dst is a contiguous CPU tensor of that dtype and size, with
// no temporary tensor (a checkpoint loader's peak is then the model's
// size); it reports false, having done nothing, otherwise (the caller
// copies through FromBytes). It copies 64 MiB at a time and, when after is
// not nil, calls it with each piece of data once copied (a loader drops the
// piece's mapped pages there, so that not even one whole tensor of the file
// stays resident).
func CopyBytesInto(dst *Tensor, data []byte, dtype DType, after func(piece []byte)) (bool, error) {
	if dst == nil || DTypeOf(dst) != dtype {
		return false, nil
	}
	if dev, err := DeviceOf(dst); err != nil || dev != CPU {
		return false, err
	}
	shape, err := Shape(dst)
	if err != nil {
		return false, err
	}
	if Numel(shape)*int64(ElemSize(dtype)) != int64(len(data)) || len(data) == 0 {
		return false, nil
	}
	defer lockThread()()
	if ok, err := dst.IsContiguous(); err != nil {
		return false, cleanErr("CopyBytesInto", err)
	} else if !ok {
		return false, nil
	}
	ptr, err := dst.DataPtr()
	if err != nil {
		return false, cleanErr("CopyBytesInto", err)
	}
	out := unsafe.Slice((*byte)(ptr), len(data))
	for off := 0; off < len(data); off += copyPiece {
		end := min(off+copyPiece, len(data))
		copy(out[off:end], data[off:end])
		if after != nil {
			after(data[off:end])
		}
	}
	return true, nil
}

// copyPiece is how many bytes CopyBytesInto copies between calls of after.
const copyPiece = 64 << 20

// FromFloat32 makes a float32 CPU tensor of shape from data.
func (s *Scope) FromFloat32(data []float32, shape ...int64) *Tensor {
	return s.FromBytes(sliceBytes(data), shape, Float32)
}

// FromInt64 makes an int64 CPU tensor of shape from data.
func (s *Scope) FromInt64(data []int64, shape ...int64) *Tensor {
	return s.FromBytes(sliceBytes(data), shape, Int64)
}

// FromBool makes a bool CPU tensor of shape from data.
func (s *Scope) FromBool(data []bool, shape ...int64) *Tensor {
	return s.FromBytes(sliceBytes(data), shape, Bool)
}

func sliceBytes[T any](xs []T) []byte {
	if len(xs) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), len(xs)*int(unsafe.Sizeof(z)))
}

// Bytes returns x's raw bytes (its dtype, little-endian, row-major) on the
// host. It copies; x may live on any device and be non-contiguous.
func Bytes(x *Tensor) ([]byte, error) {
	s := NewScope()
	defer s.Close()
	c := s.To(x, CPU, x.DType())
	c = s.Contiguous(c)
	if err := s.Err(); err != nil {
		return nil, err
	}
	sh, err := Shape(c)
	if err != nil {
		return nil, err
	}
	n := Numel(sh) * int64(ElemSize(x.DType()))
	if n == 0 {
		return []byte{}, nil
	}
	p, err := c.DataPtr()
	if err != nil {
		return nil, cleanErr("DataPtr", err)
	}
	out := make([]byte, n)
	copy(out, unsafe.Slice((*byte)(p), n))
	return out, nil
}

// Float32s returns x's values converted to float32, row-major.
func Float32s(x *Tensor) ([]float32, error) {
	return values[float32](x, Float32)
}

// Int64s returns x's values converted to int64, row-major.
func Int64s(x *Tensor) ([]int64, error) {
	return values[int64](x, Int64)
}

// Float64s returns x's values converted to float64, row-major.
func Float64s(x *Tensor) ([]float64, error) {
	return values[float64](x, Float64)
}

// Item is the value of a one-element tensor as float64.
func Item(x *Tensor) (float64, error) {
	v, err := Float64s(x)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("torch Item: tensor has %d elements, want 1", len(v))
	}
	return v[0], nil
}

func values[T any](x *Tensor, dt DType) ([]T, error) {
	if x == nil {
		return nil, fmt.Errorf("torch values: nil tensor")
	}
	s := NewScope()
	defer s.Close()
	c := s.Contiguous(s.To(s.Detach(x), CPU, dt))
	if err := s.Err(); err != nil {
		return nil, err
	}
	sh, err := Shape(c)
	if err != nil {
		return nil, err
	}
	n := Numel(sh)
	out := make([]T, n)
	if n == 0 {
		return out, nil
	}
	p, err := c.DataPtr()
	if err != nil {
		return nil, cleanErr("DataPtr", err)
	}
	copy(out, unsafe.Slice((*T)(p), n))
	return out, nil
}

// Handle is x's libtorch handle (torch::Tensor*, gotch's C `tensor`), for a
// C++ shim over libtorch (model/dist, model/fused); nil for nil.
func Handle(x *Tensor) unsafe.Pointer {
	if x == nil {
		return nil
	}
	return x.Ctensor()
}

// AdoptHandle makes s the owner of h, a new torch::Tensor* that a C++ shim
// allocated for its caller (nil records an error).
func (s *Scope) AdoptHandle(op string, h unsafe.Pointer) *Tensor {
	if h == nil {
		s.Fail(fmt.Errorf("torch %s: returned no tensor", op))
		return nil
	}
	return s.track(op, ts.New(lib.Ctensor(h)), nil)
}
