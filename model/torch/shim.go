package torch

// gotch's C API defines these in its libtch archive, which every binary that
// imports gotch links; gotch just has no Go wrappers for them. Declaring them
// here (no libtorch headers needed) lets the linker resolve them there.

/*
#include <stdint.h>
void at_manual_seed(int64_t);
void at_set_num_threads(int);
int at_get_num_threads();
int at_grad_set_enabled(int);
*/
import "C"

func cManualSeed(seed int64) { C.at_manual_seed(C.int64_t(seed)) }
func cSetNumThreads(n int)   { C.at_set_num_threads(C.int(n)) }
func cNumThreads() int       { return int(C.at_get_num_threads()) }

func cGradSetEnabled(on bool) bool {
	b := C.int(0)
	if on {
		b = 1
	}
	return C.at_grad_set_enabled(b) == 1
}
