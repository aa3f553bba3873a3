// The C API of model/dist's shim over libtorch's c10d (c10d.cc). Every
// function that can fail returns NULL on success or a malloc'd message the
// caller frees; no C++ exception crosses it. Tensors are gotch handles
// (torch::Tensor*, gotch's C `tensor`).
#ifndef EVOLM_DIST_C10D_H
#define EVOLM_DIST_C10D_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct evolm_dist_group evolm_dist_group;

// Reduction ops (c10d::ReduceOp); EVOLM_DIST_AVG is a sum divided by the
// world size on the caller's side of the collective.
enum { EVOLM_DIST_SUM = 0, EVOLM_DIST_AVG = 1, EVOLM_DIST_MAX = 2, EVOLM_DIST_MIN = 3 };

// evolm_dist_nccl_built reports whether ProcessGroupNCCL was compiled in.
int evolm_dist_nccl_built(void);

// evolm_dist_nccl_version writes the version of the NCCL library this
// process loaded ("2.18.1") into buf (n bytes), or "" without NCCL.
void evolm_dist_nccl_version(char* buf, int n);

// evolm_dist_init connects to (is_server: starts) the TCPStore at addr:port,
// wraps it in store_prefix (empty: none) and the default group's prefixes as
// torch.distributed.init_process_group does, and creates the backend
// ("gloo" or "nccl"; device: the CUDA index for nccl). timeout_ms bounds the
// rendezvous and is every collective's default timeout.
char* evolm_dist_init(const char* backend, const char* addr, int port, int is_server,
                      const char* store_prefix, int rank, int world, int device,
                      int64_t timeout_ms, evolm_dist_group** out);
char* evolm_dist_all_reduce(evolm_dist_group* g, void* t, int op, int64_t timeout_ms);
char* evolm_dist_reduce_scatter(evolm_dist_group* g, void* out, void* in, int op, int64_t timeout_ms);
char* evolm_dist_all_gather(evolm_dist_group* g, void* out, void* in, int64_t timeout_ms);
char* evolm_dist_broadcast(evolm_dist_group* g, void* t, int root, int64_t timeout_ms);
char* evolm_dist_barrier(evolm_dist_group* g, int64_t timeout_ms);
void evolm_dist_close(evolm_dist_group* g);

// ZeRO-2 gradient reduction during backward (see zero2 in c10d.cc and
// Zero2 in zero2.go). params are leaf tensors that require grad, in the
// order their gradients are reduced; owners[i] is params[i]'s owning rank.
typedef struct evolm_dist_zero2 evolm_dist_zero2;
char* evolm_dist_zero2_attach(evolm_dist_group* g, void** params, const int* owners, int n,
                              int64_t timeout_ms, evolm_dist_zero2** out);
char* evolm_dist_zero2_end_pass(evolm_dist_zero2* z);
char* evolm_dist_zero2_finish(evolm_dist_zero2* z);
void evolm_dist_zero2_reset(evolm_dist_zero2* z);
int64_t evolm_dist_zero2_peak_bytes(evolm_dist_zero2* z);
int64_t evolm_dist_zero2_late(evolm_dist_zero2* z);
int evolm_dist_zero2_failed(evolm_dist_zero2* z);
void evolm_dist_zero2_detach(evolm_dist_zero2* z);

#ifdef __cplusplus
}
#endif

#endif
