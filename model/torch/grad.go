package torch

import "runtime"

// SetGrad sets libtorch's grad mode for this goroutine's OS thread and returns
// a function that restores the previous mode and unlocks the thread. Use it as
//
//	defer torch.SetGrad(false)()
//
// The thread stays locked until restore runs, since the mode is thread-local
// (and, like a Scope, SetGrad keeps a goroutine on its first thread for
// good: see claimThread).
func SetGrad(enabled bool) (restore func()) {
	locked := holdThread()
	prev := setGrad(enabled)
	return func() {
		setGrad(prev)
		if locked {
			runtime.UnlockOSThread()
		}
	}
}

// NoGrad runs fn with grad mode off (torch.no_grad()).
func NoGrad(fn func() error) error {
	defer SetGrad(false)()
	return fn()
}

// WithGrad runs fn with grad mode on (torch.enable_grad()).
func WithGrad(fn func() error) error {
	defer SetGrad(true)()
	return fn()
}

// SwapGrad sets this thread's grad mode and returns the one it replaces,
// holding no lock: for a goroutine that owns its thread and switches between
// coroutines on it, each of which keeps a grad mode of its own (the engine
// thread of model/torchbe). Elsewhere use SetGrad.
func SwapGrad(enabled bool) (prev bool) { return setGrad(enabled) }

// GradEnabled reports this thread's grad mode. Call it with the thread locked
// (inside a Scope or SetGrad) for the answer to mean anything.
func GradEnabled() bool {
	prev := setGrad(true)
	setGrad(prev)
	return prev
}

// setGrad sets the mode and returns the previous one. It goes through our shim:
// gotch's AtGradSetEnabled reads a C int through an *int and returns garbage
// high bits. at_grad_set_enabled cannot fail for a 0/1 argument.
func setGrad(enabled bool) bool { return cGradSetEnabled(enabled) }
