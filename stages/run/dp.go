package run

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"os"
	"strconv"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// dataParallel is the loop's data-parallel group (nil: one process). Every
// rank runs the same loop on the same data: each call to a role's engine
// (generation, judge scores, log-probs) is split by request index across the
// ranks — a request holds a prompt's n samples, so a GRPO group stays whole
// on one rank — and the answers are all-gathered (gob bytes over c10d), so
// that every rank sees every row. Whatever the loop computes from rows
// (reward statistics, the steps row, the replay buffer, pairs) is thus the
// one-process result on every rank. Rank 0 alone writes shards, manifests
// and checkpoints (but for each rank's optimizer shard at ZeRO ≥ 1). The
// learner trains each rank's block of the global batch's micro-batches and
// all-reduces the gradients (backend.LearnerConfig.Group).
type dataParallel struct {
	g backend.Group // opened by the policy's backend (roles.OpenGroup)
}

// worldEnv reports whether the environment makes this process a rank of a
// group of more than one (torchrun's WORLD_SIZE).
func worldEnv() bool {
	n, err := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	return err == nil && n > 1
}

// initDP joins the group the environment names (torchrun's variables), or
// returns nil for one process.
func (l *loop) initDP(ctx context.Context) error {
	if !worldEnv() {
		return nil
	}
	g, err := roles.OpenGroup(ctx, roles.GroupOptions{Timeout: l.cfg.DistTimeout,
		Roles: []*roles.Config{&l.cfg.Policy, &l.cfg.RubricGen, &l.cfg.Judge}})
	if err != nil {
		return err
	}
	l.dp = &dataParallel{g: g}
	l.env.Log = l.env.Log.With("rank", g.Rank())
	return nil
}

func (d *dataParallel) close() {
	if d != nil {
		_ = d.g.Close()
	}
}

// lead reports whether this process writes the run's outputs: rank 0, or
// the only process.
func (l *loop) lead() bool { return l.dp == nil || l.dp.g.Rank() == 0 }

func (l *loop) world() int {
	if l.dp == nil {
		return 1
	}
	return l.dp.g.WorldSize()
}

// peerErr words a failed collective: which ranks may have died.
func (d *dataParallel) peerErr(what string, err error) error {
	peers := "the other ranks"
	switch w, r := d.g.WorldSize(), d.g.Rank(); {
	case w == 2:
		peers = fmt.Sprintf("rank %d", 1-r)
	case r == 0:
		peers = fmt.Sprintf("one of ranks 1..%d", w-1)
	}
	return fmt.Errorf("data-parallel rank %d of %d: %s: %w\n(%s died, failed or stalled past %s; rank 0 commits a step only after its collectives succeed: `evolm run --resume` continues from the last checkpoint)",
		d.g.Rank(), d.g.WorldSize(), what, err, peers, "dist_timeout")
}

// gather runs compute on this rank and all-gathers its gob-encoded result
// from every rank, in rank order. A rank's error reaches every rank, so all
// fail together with the same message.
func gather[T any](d *dataParallel, what string, compute func() (T, error)) ([]T, error) {
	type msg struct {
		V   T
		Err string
	}
	var m msg
	v, err := compute()
	if err != nil {
		m.Err = err.Error()
	} else {
		m.V = v
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(m); err != nil {
		return nil, fmt.Errorf("%s: encode: %w", what, err)
	}
	parts, err := d.g.AllGatherBytes(buf.Bytes())
	if err != nil {
		return nil, d.peerErr(what, err)
	}
	out := make([]T, len(parts))
	for k, p := range parts {
		var mk msg
		if err := gob.NewDecoder(bytes.NewReader(p)).Decode(&mk); err != nil {
			return nil, fmt.Errorf("%s: rank %d's answer: %w", what, k, err)
		}
		if mk.Err != "" {
			return nil, fmt.Errorf("%s on rank %d: %s", what, k, mk.Err)
		}
		out[k] = mk.V
	}
	return out, nil
}

// split runs f on this rank's block of reqs and returns every rank's
// answers concatenated: the answers to reqs. bounds are the engine's batch
// boundaries (chunk k is reqs[bounds[k]:bounds[k+1]]); a rank gets a
// contiguous block of whole chunks, so that every batch the engine runs is
// the one it would run in one process — generation is batch-invariant only
// up to float rounding, which can flip a sampled token (package generate),
// and the ranks must sample what one process samples.
func split[Q, A any](d *dataParallel, what string, reqs []Q, bounds []int, f func([]Q) ([]A, error)) ([]A, error) {
	ca, cb := backend.RankBlock(len(bounds)-1, d.g.Rank(), d.g.WorldSize())
	a, b := bounds[ca], bounds[cb]
	parts, err := gather(d, what, func() ([]A, error) {
		if a == b {
			return nil, nil
		}
		return f(reqs[a:b])
	})
	if err != nil {
		return nil, err
	}
	var out []A
	for _, p := range parts {
		out = append(out, p...)
	}
	if len(out) != len(reqs) {
		return nil, fmt.Errorf("%s: ranks answered %d of %d requests", what, len(out), len(reqs))
	}
	return out, nil
}

// chunks returns the batch boundaries of n requests packed greedily into
// batches of at most maxBatch rows (a request of more rows gets its own), as
// package generate packs them; rows(i) is request i's rows.
func chunks(n, maxBatch int, rows func(int) int) []int {
	bounds := []int{0}
	for start := 0; start < n; {
		end, r := start, 0
		for end < n && (end == start || r+rows(end) <= maxBatch) {
			r += rows(end)
			end++
		}
		bounds = append(bounds, end)
		start = end
	}
	return bounds
}

// perRequest is one chunk per request (engines whose calls do not batch
// requests together).
func perRequest(n int) []int {
	b := make([]int, n+1)
	for i := range b {
		b[i] = i
	}
	return b
}

type dpGenerator struct {
	d        *dataParallel
	inner    backend.Generator
	maxBatch int
}

func (g dpGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	bounds := chunks(len(reqs), g.maxBatch, func(i int) int { return reqs[i].Samples() })
	return split(g.d, "generate", reqs, bounds, func(q []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
		return g.inner.Generate(ctx, q)
	})
}

// leadGenerator is the fleet's generator under data parallelism: rank 0
// sends every request to the servers (the learner ranks compute nothing
// for it) and every rank gets the answers, so that the fleet's weight
// sync, version checks and rotation stay in one process.
type leadGenerator struct {
	d     *dataParallel
	inner backend.Generator // the fleet, on rank 0; nil elsewhere
}

func (g leadGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	parts, err := gather(g.d, "generate (fleet)", func() ([]backend.GenerateResponse, error) {
		if g.inner == nil {
			return nil, nil
		}
		return g.inner.Generate(ctx, reqs)
	})
	if err != nil {
		return nil, err
	}
	if len(parts[0]) != len(reqs) {
		return nil, fmt.Errorf("generate (fleet): rank 0 answered %d of %d requests", len(parts[0]), len(reqs))
	}
	return parts[0], nil
}

type dpScorer struct {
	d     *dataParallel
	inner backend.Scorer
}

func (s dpScorer) Score(ctx context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	return split(s.d, "score", reqs, perRequest(len(reqs)), func(q []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
		return s.inner.Score(ctx, q)
	})
}

type dpLogProber struct {
	d        *dataParallel
	inner    backend.LogProber
	maxBatch int
}

func (p dpLogProber) LogProbs(ctx context.Context, reqs []backend.LogProbRequest) ([]backend.LogProbResponse, error) {
	bounds := chunks(len(reqs), p.maxBatch, func(int) int { return 1 })
	return split(p.d, "log-probs", reqs, bounds, func(q []backend.LogProbRequest) ([]backend.LogProbResponse, error) {
		return p.inner.LogProbs(ctx, q)
	})
}

// splitBackend makes b's engine calls data-parallel (once per backend);
// maxBatch is the role's max_batch (the engine's batch, 64 when unset).
func (d *dataParallel) splitBackend(b *roles.Backend, maxBatch int) {
	if d == nil || b == nil {
		return
	}
	if _, done := b.Scorer.(dpScorer); done {
		return
	}
	if maxBatch <= 0 {
		maxBatch = 64 // torchbe's default
	}
	if _, fleet := b.Generator.(leadGenerator); !fleet {
		b.Generator = dpGenerator{d: d, inner: b.Generator, maxBatch: maxBatch}
	}
	b.Scorer = dpScorer{d: d, inner: b.Scorer}
	if b.LogProber != nil {
		b.LogProber = dpLogProber{d: d, inner: b.LogProber, maxBatch: maxBatch}
	}
}

// startState is what rank 0 decides before the first step and every rank
// follows: the step to start at, its checkpoint, the skipped-update count.
type startState struct {
	Start   int
	Ckpt    string
	Skipped int
	Out     string // the directory the run writes to (pipeline.Env.Out)
}

// agreeStart runs decide on rank 0 and hands its result (or its error) to
// every rank.
func (l *loop) agreeStart(decide func() (startState, error)) (startState, error) {
	if l.dp == nil {
		return decide()
	}
	all, err := gather(l.dp, "start", func() (startState, error) {
		if !l.lead() {
			return startState{}, nil
		}
		return decide()
	})
	if err != nil {
		return startState{}, err
	}
	return all[0], nil
}

// barrier waits for every rank (a checkpoint's phases).
func (l *loop) barrier(what string) error {
	if l.dp == nil {
		return nil
	}
	if err := l.dp.g.Barrier(); err != nil {
		return l.dp.peerErr(what, err)
	}
	return nil
}

// shardedOptimizer reports whether each rank saves its own optimizer file.
func (l *loop) shardedOptimizer() bool { return l.dp != nil && l.cfg.ZeRO > 0 }

// optimizerName is a role's optimizer file name in a checkpoint:
// <role>_optimizer.safetensors, or with sharded state
// <role>_optimizer.rank-K-of-N.safetensors.
func (l *loop) optimizerName(role string) string {
	if !l.shardedOptimizer() {
		return role + optimizerSuffix
	}
	return fmt.Sprintf("%s_optimizer.rank-%d-of-%d.safetensors", role, l.dp.g.Rank(), l.dp.g.WorldSize())
}
