package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/torch"
)

// collectivesCmd joins a process group of -world ranks, NCCL on a CUDA
// -device (rank r on cuda:r) and Gloo on the CPU, and checks an all-reduce
// (sum) and a broadcast from rank 0 of float32 tensors on the rank's
// device against their exact results. Without -rank it starts the ranks
// as child processes and merges their reports.
func collectivesCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	world := fs.Int("world", 1, "ranks")
	rank := fs.Int("rank", -1, "this process's rank (set by the parent, which starts the ranks)")
	port := fs.Int("port", 0, "rank 0's TCPStore port (set by the parent)")
	return func() (any, error) {
		if *rank < 0 {
			return spawnRanks(c, *world)
		}
		d, err := torch.ParseDevice(c.device)
		if err != nil {
			return nil, err
		}
		o := dist.Options{Rank: *rank, WorldSize: *world, LocalRank: *rank, MasterPort: *port, Backend: dist.Gloo, Timeout: 2 * time.Minute}
		dev := torch.CPU
		if torch.IsCUDA(d) {
			o.Backend, dev = dist.NCCL, torch.CUDA(*rank)
		}
		g, err := dist.Init(context.Background(), o)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		const n = 4096
		s := torch.NewScope()
		defer s.Close()
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32((*rank + 1) * (i%97 + 1))
		}
		x := s.To(s.FromFloat32(vals, n), dev, torch.Float32)
		y := s.To(s.Arange(0, n, torch.Float32, torch.CPU), dev, torch.Float32)
		if *rank != 0 {
			s.Zero_(y)
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
		if err := g.AllReduce(x, dist.Sum); err != nil {
			return nil, err
		}
		if err := g.Broadcast(y, 0); err != nil {
			return nil, err
		}
		sum, err := torch.Float32s(x)
		if err != nil {
			return nil, err
		}
		got, err := torch.Float32s(y)
		if err != nil {
			return nil, err
		}
		w := *world * (*world + 1) / 2
		bad := 0
		for i := range sum {
			if sum[i] != float32(w*(i%97+1)) || got[i] != float32(i) {
				bad++
			}
		}
		return map[string]any{"rank": *rank, "world": *world, "backend": g.Backend(), "device": torch.DeviceName(dev), "wrong": bad}, nil
	}
}

// spawnRanks runs this command once per rank and gathers their reports.
func spawnRanks(c *common, world int) (any, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmds := make([]*exec.Cmd, world)
	outs := make([]*bytes.Buffer, world)
	for r := range cmds {
		cmds[r] = exec.Command(os.Args[0], "collectives", "-device", c.device, "-world", strconv.Itoa(world),
			"-rank", strconv.Itoa(r), "-port", strconv.Itoa(port))
		outs[r] = &bytes.Buffer{}
		cmds[r].Stdout, cmds[r].Stderr = outs[r], os.Stderr
		if err := cmds[r].Start(); err != nil {
			return nil, err
		}
	}
	var reports []map[string]any
	var first error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil && first == nil {
			first = fmt.Errorf("rank %d: %w", r, err)
		}
		var rep map[string]any
		if json.Unmarshal(outs[r].Bytes(), &rep) == nil {
			reports = append(reports, rep)
		}
	}
	if first != nil {
		return nil, first
	}
	wrong := 0.0
	for _, rep := range reports {
		wrong += rep["wrong"].(float64)
	}
	return map[string]any{"world": world, "ranks": reports, "wrong": wrong}, nil
}
