package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The ranks evolm starts skip nvFuser (and with it every CUDA library of
// libtorch's CPU build) unless the environment says otherwise; a process
// started so maps no libtorch_cuda.
func TestRanksSkipNvfuser(t *testing.T) {
	env := withoutNvfuser([]string{"A=1"})
	if got := env[len(env)-1]; got != nvfuserEnv+"="+skipNvfuser {
		t.Errorf("env %v, want %s set", env, nvfuserEnv)
	}
	mine := []string{nvfuserEnv + "=/opt/nvfuser/"}
	if got := withoutNvfuser(mine); len(got) != 1 || got[0] != mine[0] {
		t.Errorf("a user's %s replaced: %v", nvfuserEnv, got)
	}
	// This test binary links libtorch like evolm: started with the
	// variable, it must not have mapped libtorch_cuda (TestMain prints the
	// child's mapped libraries).
	cmd := exec.Command(os.Args[0])
	cmd.Env = withoutNvfuser(append(os.Environ(), "EVOLM_TEST_MAPS_CHILD=1"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "libtorch_cpu") {
		t.Fatalf("the child listed no libtorch mapping:\n%s", out)
	}
	if strings.Contains(string(out), "libtorch_cuda") {
		t.Errorf("a process started with %s mapped libtorch_cuda:\n%s", nvfuserEnv, out)
	}
}

// TestMain runs the tests, or, as the child of TestRanksSkipNvfuser
// (EVOLM_TEST_MAPS_CHILD=1), prints the shared libraries the process
// mapped and exits.
func TestMain(m *testing.M) {
	if os.Getenv("EVOLM_TEST_MAPS_CHILD") != "1" {
		os.Exit(m.Run())
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, ".so") {
			fmt.Println(l)
		}
	}
	os.Exit(0)
}
