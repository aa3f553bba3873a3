package main

import "strings"

// nvfuserEnv names the directory libtorch 2.1 loads nvFuser
// (libnvfuser_codegen.so) from while it is being loaded, before main. evolm
// never uses nvFuser, and on a CPU machine loading it maps every CUDA
// library: 2.3 GB of address space and 175 MB resident per process
// (docs/troubleshooting.md). A directory without the library skips it.
const nvfuserEnv = "TORCH_NVFUSER_LIBRARY_PATH"

// skipNvfuser is nvfuserEnv's value in the environment of the processes
// evolm starts (the ranks of --nproc), unless the environment sets it.
const skipNvfuser = "/evolm-skips-nvfuser/"

// withoutNvfuser returns env (os.Environ's form) with nvfuserEnv set to
// skipNvfuser when env does not set it.
func withoutNvfuser(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, nvfuserEnv+"=") {
			return env
		}
	}
	return append(env, nvfuserEnv+"="+skipNvfuser)
}
