package main

import (
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
	if os.Getenv("EVOLM_TEST_MAPS_CHILD") == "1" {
		return
	}
	// This test binary links libtorch like evolm: started with the
	// variable, it must not have mapped libtorch_cuda.
	cmd := exec.Command(os.Args[0], "-test.run=^TestMapsOfChild$", "-test.count=1", "-test.v")
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

// TestMapsOfChild prints the libraries the process mapped (the child of
// TestRanksSkipNvfuser).
func TestMapsOfChild(t *testing.T) {
	if os.Getenv("EVOLM_TEST_MAPS_CHILD") != "1" {
		t.Skip("the child of TestRanksSkipNvfuser")
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, ".so") {
			t.Log(l)
		}
	}
}
