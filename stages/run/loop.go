package run

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/schedule"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/serving/runplan"
	"github.com/evolm/evolm/stages/judge"
)

type stage struct {
	cfg *Config
	set *prompts.Set
}

func newFromConfig(cfg *pipeline.Config) (*stage, error) {
	c, err := FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	set, err := roles.Prompts(c.Policy, c.RubricGen, c.Judge)
	if err != nil {
		return nil, err
	}
	if c.MemoryCheck {
		// Before any model is loaded: a configuration that cannot fit the
		// policy's device stops here, with the plan (evolm plan).
		if err := runplan.Refuse(cfg, c.Learner, c.PlanOptions()); err != nil {
			return nil, cfg.Errorf("memory_check", "%v\n(set stages.run.memory_check: false to start anyway)", err)
		}
	}
	return &stage{cfg: c, set: set}, nil
}

// loop is one running co-evolution loop.
type loop struct {
	cfg     *Config
	env     *pipeline.Env
	set     *prompts.Set
	prompts []schemas.Prompt
	stream  *schedule.Stream // the prompts' seeded epoch order

	policy, rubric *roles.Trained // the same *Role when the model is shared
	// fleet, with generation_backend openai, generates for the trained
	// role on inference servers; nil: in process.
	fleet   roles.Fleet
	judge   *roles.Backend
	buf     *pairs.Buffer
	ckpt    string // checkpoint id recorded in rows ("initial" or "step-NNNNNN")
	prog    *pipeline.Progress
	skipped int // updates skipped in a row for a non-finite loss or gradient norm
	hooks   hooks
	clock   stepClock     // the step's time breakdown
	track   tracking      // the trackers (rank 0)
	dp      *dataParallel // nil: one process

	// inferrer, with backtranslate_source frozen_initial, is a frozen copy
	// of the initial policy model that infers back-translated questions.
	inferrer *roles.Backend
}

// Run implements pipeline.Stage.
func (s *stage) Run(ctx context.Context, env *pipeline.Env) (err error) {
	l := &loop{cfg: s.cfg, env: env, set: s.set, ckpt: "initial"}
	if err := l.initDP(ctx); err != nil {
		return err
	}
	defer l.dp.close()
	if err := l.loadPrompts(ctx); err != nil {
		return err
	}
	// Rank 0 alone touches the run directory's config and checkpoints
	// (a fresh start forgets them); the others follow its decision.
	st, err := l.agreeStart(func() (startState, error) {
		if err := l.snapshotConfig(); err != nil {
			return startState{}, err
		}
		start, ck, err := l.latestCheckpoint()
		if err == nil {
			err = l.checkModels(ck)
		}
		return startState{Start: start, Ckpt: ck, Skipped: l.skipped, Out: env.Out.Dir}, err
	})
	if err != nil {
		return err
	}
	if env.Out.Dir != st.Out {
		// A follower writes its optimizer shards where rank 0 writes the
		// run: the run itself, or its --fresh staging.
		env.Out = &pipeline.Run{Dir: st.Out}
	}
	start, ck := st.Start, st.Ckpt
	l.skipped = st.Skipped
	if start >= s.cfg.Steps {
		env.Log.Info("run already complete", "steps", s.cfg.Steps, "checkpoint", ck)
		return nil
	}
	if err := l.openTrackers(ctx, start); err != nil {
		return err
	}
	defer func() { l.closeTrackers(err) }()
	if err := l.open(ctx, ck); err != nil {
		l.close()
		return err
	}
	defer l.close()
	if ck != "" {
		env.Log.Info("resuming from checkpoint", "checkpoint", ck, "next_step", start)
	}
	l.prog = env.NewProgress("steps", int64(s.cfg.Steps))
	l.prog.Add(int64(start))
	defer l.prog.Done()
	l.registerHooks()
	l.clock.begin()
	for step := start; step < s.cfg.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		err := l.syncFleet(ctx, step)
		l.clock.since(partWeightSync, t0)
		if err != nil {
			return err
		}
		var m schemas.StepMetrics
		if s.cfg.Phase(step) == schemas.PhasePolicy {
			m, err = l.policyStep(ctx, step)
		} else {
			m, err = l.rubricStep(ctx, step)
		}
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", step, s.cfg.Phase(step), err)
		}
		l.clock.finish(&m)
		if err := l.hooks.afterStep(ctx, step, &m); err != nil {
			return err
		}
	}
	return nil
}

// loadPrompts reads the whole prompt stream (prompts are small next to the
// model; the stream must be indexable to make the data position a function
// of the step).
func (l *loop) loadPrompts(ctx context.Context) error {
	files, err := lmstage.Inputs(l.env, l.cfg.Input, "dedup", schemas.Prompts.Name)
	if err != nil {
		return err
	}
	for _, f := range files {
		for rec, err := range pipeline.ReadShard(ctx, f, l.env.ReadOptions(schemas.Prompts.Schema())) {
			if err != nil {
				return err
			}
			rows, err := schemas.Prompts.Read(rec)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			l.prompts = append(l.prompts, rows...)
		}
	}
	if len(l.prompts) == 0 {
		return fmt.Errorf("prompts %v hold no rows", files)
	}
	l.stream = schedule.NewStream(len(l.prompts), l.cfg.Seed)
	return nil
}

// batch returns the prompts of step (schedule.Schedule.Batch).
func (l *loop) batch(step int) []schemas.Prompt {
	return l.pick(l.cfg.Schedule().Batch(l.stream, step))
}

// pick returns the prompts at indexes idx.
func (l *loop) pick(idx []int) []schemas.Prompt {
	out := make([]schemas.Prompt, len(idx))
	for i, k := range idx {
		out[i] = l.prompts[k]
	}
	return out
}

// snapshotConfig keeps the loop's config section (stages.run, nothing of
// pipeline.* or log.*, so a later --resume cannot inherit --fresh) in the run
// directory, so that `evolm run --resume DIR` continues with the same
// settings. Under --fresh the loop writes into a staging run (Env.Out) that
// holds no checkpoints and no config.yaml: the old ones stay in place until
// the new run has finished (pipeline.FreshDir).
func (l *loop) snapshotConfig() error {
	path := l.env.Out.Path("config.yaml")
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	b, err := l.env.Config.FileYAML()
	if err != nil {
		return err
	}
	return pipeline.WriteFileAtomic(path, b)
}

// open opens the trained roles (from checkpoint ck when set), the judge and
// the replay buffer.
func (l *loop) open(ctx context.Context, ck string) error {
	var err error
	if l.policy, err = l.openRole(l.cfg.Policy, ck); err != nil {
		return err
	}
	l.rubric = l.policy
	if !l.cfg.RubricGen.Shared {
		if l.rubric, err = l.openRole(l.cfg.RubricGen, ck); err != nil {
			return err
		}
	}
	if l.judge, err = roles.Open(l.cfg.Judge, l.env.Log); err != nil {
		return err
	}
	if l.cfg.InferSource == pairs.InferFrozenInitial {
		// A second load of the initial policy model, never trained (also on
		// resume: it stays the initial model).
		if l.inferrer, err = roles.Open(l.cfg.Policy, l.env.Log); err != nil {
			return fmt.Errorf("backtranslate_source %s: %w", pairs.InferFrozenInitial, err)
		}
	}
	if err := l.openFleet(); err != nil {
		return err
	}
	l.dp.splitBackend(l.policy.Backend, l.cfg.Policy.MaxBatch)
	l.dp.splitBackend(l.rubric.Backend, l.cfg.RubricGen.MaxBatch)
	l.dp.splitBackend(l.judge, l.cfg.Judge.MaxBatch)
	l.dp.splitBackend(l.inferrer, l.cfg.Policy.MaxBatch)
	if ck == "" {
		l.buf, err = pairs.NewBuffer(l.cfg.ReplaySize)
		return err
	}
	l.ckpt = ck
	path := l.env.Out.Path(ckptDir(ck) + "/replay.parquet")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("checkpoint %s: replay buffer %s is missing: the checkpoint is incomplete; remove it to resume from an earlier one", ck, path)
	}
	l.buf, err = loadBuffer(ctx, path, l.cfg.ReplaySize, l.env.Mem)
	return err
}

// openRole opens a trained role through package trained (the engine is
// registered there, not linked here), restoring it from checkpoint ck when
// set.
func (l *loop) openRole(rc roles.Config, ck string) (*roles.Trained, error) {
	opt := roles.TrainOptions{Learner: l.cfg.TrainerFor(rc.Role)}
	if l.dp != nil {
		opt.Learner.Group = l.dp.g
	}
	if ck != "" {
		opt.Resume = &roles.Resume{Dir: l.env.Out.Path(roleDir(ck, rc.Role)), Optimizer: l.env.Out.Path(ckptDir(ck) + "/" + l.optimizerName(rc.Role))}
	}
	r, err := roles.OpenTrained(rc, opt, l.env.Log)
	if err != nil && ck != "" {
		return nil, fmt.Errorf("checkpoint %s: %w", ck, err)
	}
	return r, err
}

// openFleet, with generation_backend openai, puts the fleet in place of
// the trained role's in-process generator: rollouts, rubrics, question
// inference and rubric-guided answers all go to the servers, while the
// learner scores and trains in process.
func (l *loop) openFleet() error {
	fc := l.cfg.Fleet
	if fc == nil {
		return nil
	}
	enc, ok := l.policy.Trainer.(backend.TextEncoder)
	if !ok {
		return fmt.Errorf("generation_backend %s: the %s backend's trainer cannot tokenize text", fc.Backend, l.cfg.Policy.Backend)
	}
	if !l.lead() {
		// Rank 0 alone talks to the fleet (leadGenerator).
		l.policy.Generator = leadGenerator{d: l.dp}
		return nil
	}
	mode := roles.FleetFull
	if l.cfg.Learner.LoRA.Rank > 0 {
		mode = roles.FleetLoRA
	}
	dir := fc.SyncDir
	if dir == "" {
		dir = l.env.Run.Path("sync")
	}
	f, err := roles.OpenFleet(fc.Backend, roles.FleetOptions{Endpoints: fc.Endpoints, MaxInFlight: fc.MaxInFlight, MaxAttempts: fc.MaxAttempts,
		RequestTimeout: fc.RequestTimeout, Mode: mode, Dir: dir, RunDir: l.env.Run.Dir, Role: roles.Policy,
		Encode: enc.Encode, EndID: enc.EndTokenID(), Log: l.env.Log})
	if err != nil {
		return err
	}
	l.fleet = f
	l.policy.Generator = f // the rubric generator shares it (FromConfig refuses a second model)
	if l.dp != nil {
		l.policy.Generator = leadGenerator{d: l.dp, inner: f}
	}
	return nil
}

// syncFleet makes the learner's current weights the fleet's before step's
// first generation. It fails before anything of the step is written.
func (l *loop) syncFleet(ctx context.Context, step int) error {
	if l.cfg.Fleet == nil {
		return nil
	}
	sync := func() error {
		if l.fleet == nil {
			return nil // a rank other than 0: rank 0 syncs
		}
		return l.fleet.Sync(ctx, step, func(dir string) error {
			_, err := l.policy.Trainer.Save(ctx, dir)
			return err
		})
	}
	var err error
	if l.dp == nil {
		err = sync()
	} else {
		// Rank 0's outcome reaches every rank.
		_, err = gather(l.dp, "fleet weight sync", func() (struct{}, error) { return struct{}{}, sync() })
	}
	if err != nil {
		return fmt.Errorf("step %d (%s): weight sync: %w\n(nothing of step %d was written; once the servers are back, `evolm run --resume %s` redoes it)",
			step, l.cfg.Phase(step), err, step, l.env.Run.Dir)
	}
	return nil
}

func (l *loop) close() {
	if l.fleet != nil {
		l.fleet.Close()
		l.fleet = nil
	}
	if l.policy != nil {
		l.policy.Close()
	}
	if l.rubric != nil && l.rubric != l.policy {
		l.rubric.Close()
	}
	l.policy, l.rubric = nil, nil
	if l.judge != nil {
		l.judge.Close()
	}
	if l.inferrer != nil {
		l.inferrer.Close()
		l.inferrer = nil
	}
}

// write commits rows as the step's shard of table t (plus extra partitions).
func write[T any](l *loop, t *schemas.Table[T], rows []T, step int, phase string, extra ...pipeline.Partition) error {
	if !l.lead() {
		return nil // rank 0 writes every row: each rank holds them all
	}
	defer l.clock.since(partWrites, time.Now())
	parts := append([]pipeline.Partition{pipeline.Phase(phase), pipeline.Step(step)}, extra...)
	rel := pipeline.ShardPath(t.Name, 0, parts...)
	prov := l.env.Provenance()
	w, err := pipeline.CreateShard(l.env.Out.Path(rel), t.Schema(), pipeline.WriteOptions{
		Mem: l.env.Mem, Provenance: prov, RowGroupRows: l.env.RowGroupRows, CompressionLevel: l.env.Compression})
	if err != nil {
		return err
	}
	rec := t.Build(l.env.Mem, rows)
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		_ = w.Abort()
		return err
	}
	failpoint.Hit("shard-mid")
	_, err = l.env.Out.Commit(w, rel, prov, "")
	return err
}

// spec is the sampling of rc's generations at step: the role's sampling
// defaults, n samples per item.
func (l *loop) spec(rc roles.Config, phase string, step, n int) lmstage.SampleSpec {
	return lmstage.SampleSpec{
		Role: rc.Role, Phase: phase, Step: int64(step), N: n, BaseSeed: l.cfg.Seed, Checkpoint: l.ckpt, Sampling: rc.Sampling,
	}
}

func (l *loop) newJudge(phase string, step int) *judge.Judge {
	return judge.New(l.judge, judge.Options{
		Mode: l.cfg.Judge.Mode, Prompts: l.set, BatchRows: l.cfg.Judge.BatchRows,
		Reply: l.cfg.Rules.JudgeReply, JudgeUnparsed: l.cfg.UnusableRubric == UnusableJudge,
		Spec: lmstage.SampleSpec{Phase: phase, Step: int64(step), BaseSeed: l.cfg.Seed, Sampling: l.cfg.Judge.Sampling},
	})
}

// rubricItems renders the rubric generator's messages for each question
// (a system message when the prompt variant has one, then the user message).
func (l *loop) rubricItems(ids, questions []string) ([]lmstage.Item, error) {
	items := make([]lmstage.Item, len(ids))
	for i := range ids {
		msgs, err := l.set.RubricForQuestion(questions[i])
		if err != nil {
			return nil, err
		}
		items[i] = lmstage.Item{ID: ids[i], Messages: msgs}
	}
	return items, nil
}

// trainSample turns a rollout into a GRPO sample; ok is false for a row
// with no tokens to train on.
func trainSample(tr backend.Trainer, msgs []backend.Message, ro *schemas.Rollout, adv float64) (backend.TrainSample, bool, error) {
	if ro.Error != nil || len(ro.TokenIDs) == 0 {
		return backend.TrainSample{}, false, nil
	}
	prompt, err := tr.PromptTokenIDs(msgs)
	if err != nil {
		return backend.TrainSample{}, false, err
	}
	ts := backend.TrainSample{PromptTokenIDs: prompt, Advantage: adv}
	for _, id := range ro.TokenIDs {
		ts.CompletionTokenIDs = append(ts.CompletionTokenIDs, int(id))
	}
	if len(ro.TokenLogprobs) == len(ro.TokenIDs) && (ro.TokenIDsSource == nil || *ro.TokenIDsSource != backend.TokensRetokenized) {
		// The sampler's own log-probs, for truncated importance sampling
		// (tis_cap); a re-tokenized row's do not line up and are left out.
		ts.SamplerLogProbs = make([]float64, len(ro.TokenLogprobs))
		for i, lp := range ro.TokenLogprobs {
			ts.SamplerLogProbs[i] = float64(lp)
		}
	}
	// One update per batch is on-policy: like TRL (num_iterations = 1) the
	// ratio's denominator is the learner's own log-probs detached (OldLogProbs
	// nil), not the sampler's, whose KV-cached decode differs from the
	// training forward by rounding and would clip tokens for no reason.
	return ts, true, nil
}

// update runs one GRPO step on r (when any sample carries a signal) and
// fills m's training fields.
func (l *loop) update(ctx context.Context, r *roles.Trained, samples []backend.TrainSample, m *schemas.StepMetrics) error {
	m.LR = l.cfg.Learner.LR
	if len(samples) == 0 {
		l.env.Log.Warn("no group with a reward signal this step; no update", "step", m.Step, "phase", m.Phase)
		return nil
	}
	failpoint.Hit("update")
	t0 := time.Now()
	st, err := r.Trainer.TrainStep(ctx, samples)
	l.clock.train(time.Since(t0), st)
	if err != nil {
		if l.dp != nil && strings.Contains(err.Error(), "dist: ") {
			return l.dp.peerErr("update", err) // a collective of the learner failed
		}
		return err
	}
	m.Loss, m.KL, m.ClipFrac, m.GradNorm = st.Loss, st.KL, st.ClipFrac, st.GradNorm
	if st.Skipped != "" {
		// No optimizer step was taken: the weights are those of the last
		// good update. The steps row counts it; the loop stops after
		// max_skipped_updates in a row.
		l.skipped++
		m.SkippedUpdates = int64(l.skipped)
		l.env.Log.Warn("update skipped", "step", m.Step, "phase", m.Phase, "reason", st.Skipped,
			"skipped_in_a_row", l.skipped, "limit", l.cfg.MaxSkippedUpdates)
		return nil
	}
	l.skipped = 0
	return nil
}

// groupStats accumulates reward statistics over the groups of a step.
type groupStats struct {
	rewards      []float64
	groups, zero int
}

// group computes one group's advantages (missing rewards are NaN, handled by
// policy), counts it, and returns the GRPO samples of its kept members.
func (g *groupStats) group(r *roles.Trained, msgs []backend.Message, rolls []schemas.Rollout, rewards []float64, estimator string, o grpo.AdvantageOptions) ([]backend.TrainSample, error) {
	for _, x := range rewards {
		if !math.IsNaN(x) {
			g.rewards = append(g.rewards, x)
		}
	}
	adv, st, err := grpo.GroupAdvantage(estimator, rewards, o)
	if err != nil {
		return nil, err
	}
	g.groups++
	if st.ZeroStd {
		g.zero++
		return nil, nil
	}
	var out []backend.TrainSample
	for _, k := range st.Kept {
		ts, ok, err := trainSample(r.Trainer, msgs, &rolls[k], adv[k])
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, ts)
		}
	}
	return out, nil
}

func (g *groupStats) fill(m *schemas.StepMetrics) {
	if len(g.rewards) > 0 {
		mean := 0.0
		for _, r := range g.rewards {
			mean += r
		}
		mean /= float64(len(g.rewards))
		ss := 0.0
		for _, r := range g.rewards {
			ss += (r - mean) * (r - mean)
		}
		m.RewardMean, m.RewardStd = mean, math.Sqrt(ss/float64(len(g.rewards)))
	}
	if g.groups > 0 {
		m.ZeroStdFrac = float64(g.zero) / float64(g.groups)
	}
}

// lengthEntropy fills the response length and the sampled-token entropy
// estimate from rollouts.
func lengthEntropy(rs []schemas.Rollout, m *schemas.StepMetrics) {
	var toks, nll float64
	var n, nt int
	for _, r := range rs {
		if r.Error != nil {
			continue
		}
		toks += float64(r.CompletionTokens)
		n++
		for _, lp := range r.TokenLogprobs {
			nll -= float64(lp)
			nt++
		}
	}
	if n > 0 {
		m.RespLenMean = toks / float64(n)
	}
	if nt > 0 {
		m.Entropy = nll / float64(nt)
	}
}

func missingRate(js []schemas.Judgment) float64 {
	if len(js) == 0 {
		return 0
	}
	n := 0
	for _, j := range js {
		if j.Score == nil {
			n++
		}
	}
	return float64(n) / float64(len(js))
}
