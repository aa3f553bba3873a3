package plan

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/evolm/evolm/model/torch"
)

// ParseBytes reads a size such as 80GiB, 141GB, 512MiB, 80G or a plain
// byte count. GB/MB are decimal, GiB/MiB and bare G/M binary.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional unit (80GiB, 141GB)", s)
	}
	return int64(v * mult), nil
}

// Available is the memory a learner may use on device now: free CUDA memory
// for cuda / cuda:N (the driver's, cudaMemGetInfo, for the device as this
// process numbers it, CUDA_VISIBLE_DEVICES applied; it initializes CUDA
// and needs a CUDA build), MemAvailable (/proc/meminfo) for cpu.
func Available(device string) (int64, error) {
	d := strings.ToLower(strings.TrimSpace(device))
	if d == "" || d == "cpu" {
		return memAvailable("/proc/meminfo")
	}
	dev, err := torch.ParseDevice(d)
	if err != nil {
		return 0, err
	}
	if err := torch.CheckDevice(dev); err != nil {
		return 0, fmt.Errorf("free memory: %w (or give the capacity: evolm plan --gpu-mem)", err)
	}
	free, _, err := torch.CUDAMemInfo(dev)
	if err != nil {
		return 0, fmt.Errorf("free memory of %s: %w", torch.DeviceName(dev), err)
	}
	return free, nil
}

func memAvailable(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", path, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no MemAvailable", path)
}
