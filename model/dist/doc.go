// Package dist is evolm's data-parallel communication: a thin cgo shim
// (c10d.cc, c10d.h) over libtorch's own torch.distributed C++ library, c10d.
// Nothing here implements a collective or a wire protocol; a Go rank and a
// Python torch.distributed rank join one group and compute the same results
// (TestPythonInterop).
//
// # What comes from c10d
//
//   - Rendezvous: c10d::TCPStore. Rank 0 hosts it at MasterAddr:MasterPort
//     (multi-tenant, as env:// does) unless a launcher's agent hosts it
//     (AgentStore); every rank connects and waits for all WorldSize ranks.
//     The keys sit under c10d::PrefixStore's "default_pg" / "0/" / "cpu/"
//     (or "cuda/"), torch.distributed.init_process_group's layout for the
//     default group, which is what lets Go and Python ranks meet.
//   - Gloo (CPU): c10d::ProcessGroupGloo with the options Python's
//     ProcessGroupGloo(store, rank, size, timeout) builds: a device per
//     GLOO_SOCKET_IFNAME interface, else ProcessGroupGloo::createDefaultDevice.
//   - NCCL (CUDA): c10d::ProcessGroupNCCL, compiled only when the overlay is
//     generated with TORCH_CUDA=1 (EVOLM_DIST_NCCL); NCCLBuilt reports it.
//     Init sets the CUDA device to LocalRank and NCCL_BLOCKING_WAIT=1 (unless
//     set), so a failing or timed-out collective throws into Work::wait (an
//     error here) rather than the watchdog tearing the process down.
//   - The collectives are c10d's allreduce, allgather (NCCL: _allgather_base),
//     broadcast and barrier, each awaited with Work::wait(timeout). Gloo in
//     libtorch 2.1.0 has neither reduce_scatter nor _reduce_scatter_base
//     ("does not support"), so ReduceScatter on Gloo is c10d's all-reduce of a
//     copy of the input keeping the rank's piece (W times a true
//     reduce-scatter's traffic); on NCCL it is _reduce_scatter_base. Avg is
//     Sum then a division by the world size (Gloo has no AVG).
//   - ZeRO-2 (Zero2): libtorch's post-accumulate-grad hooks
//     (torch::autograd::impl::set_post_acc_grad_hooks, the C++ side of
//     Tensor.register_post_accumulate_grad_hook) reduce each parameter's
//     gradient to its owning rank with c10d's reduce while backward runs,
//     in a fixed order, and free it; see Zero2 for the protocol.
//
// # Building
//
// c10d.cc compiles against the libtorch headers of the wheel the Makefile
// provisions (torch/include, with torch/csrc/distributed/c10d/*.hpp) and,
// because ProcessGroupGloo.hpp includes them, Gloo's headers, which the wheel
// does not ship: Debian's libgloo-dev (the Makefile's build/.gloo target
// installs it). Only its headers are used: the binary links libtorch_cpu and
// libc10 (libtorch_cuda for NCCL), which hold Gloo and the process groups;
// linking Debian's libgloo.so as well would load a second Gloo. The headers
// only declare what the shim names (ProcessGroupGloo's members are standard
// containers of Gloo pointers, all Gloo code runs inside libtorch), and the
// test binary references no gloo:: symbol; the 2022-05-18 Debian headers
// against the wheel's Gloo build and run every test here.
//
// The cgo flags are machine-specific, so like gotch's they come from the
// overlay (scripts/gotch-overlay.sh writes build/_overlay/dist_cgo.go for
// cgo.go): the wheel's include directories, -D_GLIBCXX_USE_CXX11_ABI=0 (the
// PyPI wheel's ABI, torch._C._GLIBCXX_USE_CXX11_ABI is False) and
// -DUSE_C10D_GLOO as libtorch was built. The CUDA build (TORCH_CUDA=1 make
// build: -tags evolm_cuda, build/overlay-cuda.json) adds nccl_cgo.go's
// flags: -DUSE_C10D_NCCL -DEVOLM_DIST_NCCL, the CUDA and NCCL include
// directories (the wheel's nvidia/*/include and CUDA_HOME's, or the two
// headers the Makefile takes from pinned wheels into build/cuda) and
// libtorch_cuda. Building without the overlay fails with a message saying so.
//
// # Launching
//
// Each rank is a process, launched as torchrun launches PyTorch workers:
// FromEnv reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and
// torchrun's TORCHELASTIC_USE_AGENT_STORE / TORCHELASTIC_RESTART_COUNT (the
// agent's store, key prefix /worker/attempt_N). Env is the reverse, for
// launching ranks by hand (the tests and bench/dist do).
//
// # Errors
//
// Every C++ exception is caught in the shim and returned as an error; none
// crosses cgo and nothing aborts. Errors name the operation, the backend and
// this rank, followed by c10d's message: a dead peer is Gloo's "Connection
// closed by peer [addr]:port" at once; a silent peer is "timed out after N ms
// waiting for the collective" when the per-call timeout (WithTimeout, else
// the group's Options.Timeout) passes, or Gloo's "Timed out waiting N ms"
// (the group's timeout); a rank that never arrives fails Init with the
// store's "Socket Timeout". Rendezvous behaves as in Python: rank 0's
// TCPStore waits Timeout+1s for the clients, then Gloo's connect waits up to
// Timeout more, so Init fails after about 2·Timeout+1s (Python's
// init_process_group likewise). After a failed collective the group's
// state across ranks is unknown: Close it (it returns at once and destroys
// the backend in the background, since a collective abandoned on its
// per-call timeout runs on in Gloo's thread until the group's timeout).
//
// # Not tested here
//
// The NCCL path compiles and links in every `make test` (its CUDA subset
// builds the CUDA variant and runs this package's tests against it on the
// CPU: Gloo's collectives, NCCLVersion from the wheel's libnccl, and Init on
// NCCL refusing a rank whose GPU is missing, in one line, before the
// rendezvous), but its collectives have never run: there is no GPU here.
// It follows ProcessGroupNCCL.hpp of libtorch 2.1.0 (Options, the
// constructor, _allgather_base, _reduce_scatter_base, barrier's
// device_ids). On a GPU machine, scripts/gpu-check.sh runs an all-reduce
// and a broadcast on NCCL at world size 1, and 2 with two GPUs, and
// TestCollectives runs on NCCL with EVOLM_DIST_TEST_BACKEND=nccl (and
// EVOLM_DIST_TEST_WORLDS no larger than the GPU count), built as the CUDA
// variant (GOFLAGS="-overlay=build/overlay-cuda.json -tags=evolm_cuda").
package dist
