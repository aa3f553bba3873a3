package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"
)

// Env is what a running stage gets from the pipeline. Its fields are set by
// RunStage (or by a test) before Run and must not be changed by the stage.
type Env struct {
	Stage string // the stage's registered name
	Run   *Run   // the run directory: read inputs (other stages' tables) here
	// Out is where the stage writes its output: Run itself, or, under
	// --fresh, a staging run directory (see FreshDir) that replaces the old
	// output only once the stage has succeeded. MapShards writes there; a
	// stage that writes or reads back its own output by hand uses Out.
	Out    *Run
	Mem    memory.Allocator // allocate every Arrow object from it
	Log    *slog.Logger     // the stage's logger (has attr stage=<name>)
	Config *Config          // the stage's section, stages.<name>
	// ConfigHash identifies Config in provenance and manifests: its hash
	// without the spec's Volatile keys.
	ConfigHash string
	Global     *Config // the whole config (run.*, pipeline.*, …)

	Parallelism  int    // output shards processed at once (≥ 1)
	BatchSize    int64  // rows per batch when reading
	RowGroupRows int64  // rows per row group when writing
	Compression  int    // zstd level
	ProgressMode string // "tty", "log" or "off"
	Stderr       io.Writer

	// Failures counts the rows the stage sent to a model backend and those
	// that failed there; RunStage fails a stage whose rows all failed.
	Failures RowFailures

	fpMu  sync.Mutex
	fpMem map[string]string // path → fingerprint, computed once per path

	committed   committedIndex  // the run's committed shards, for checkInput
	rowsChecked map[string]bool // path and fingerprint → footer rows checked; under committed.mu
	// before is the stage's manifest in Out when Run began: the shards a
	// failed run committed are those not in it, or changed.
	before map[string]ShardInfo
}

// ReadOptions returns read options that use the env's allocator and batch
// size, checking against schema (nil: no check).
func (e *Env) ReadOptions(schema *arrow.Schema) ReadOptions {
	return ReadOptions{Mem: e.Mem, BatchSize: e.BatchSize, Schema: schema}
}

// Provenance returns the provenance of shards this stage writes from inputs
// (fingerprints).
func (e *Env) Provenance(inputs ...string) Provenance {
	return Provenance{Stage: e.Stage, ConfigHash: e.ConfigHash, CodeVersion: CodeVersion(), Inputs: inputs}
}

// NewProgress starts a progress reporter in the env's mode.
func (e *Env) NewProgress(label string, total int64) *Progress {
	return NewProgress(label, total, e.ProgressMode, e.Stderr, e.Log)
}

// Fingerprint returns the fingerprint of a file (see Fingerprint), computed
// once per path per Env.
func (e *Env) Fingerprint(path string) (string, error) {
	e.fpMu.Lock()
	defer e.fpMu.Unlock()
	if fp, ok := e.fpMem[path]; ok {
		return fp, nil
	}
	fp, err := Fingerprint(path)
	if err != nil {
		return "", err
	}
	if e.fpMem == nil {
		e.fpMem = map[string]string{}
	}
	e.fpMem[path] = fp
	return fp, nil
}

// Task makes one output shard.
type Task struct {
	// Output is the shard's run-relative path, e.g.
	// ShardPath("prompts", 0, Partition{"source", "tulu"}).
	Output string
	Schema *arrow.Schema // the output table's schema
	// Inputs are the files the task reads. Their fingerprints go into the
	// shard's provenance, and a committed shard is redone when they change.
	Inputs []string
	// Rows estimates the rows the task handles, for the progress ETA; 0: unknown.
	Rows int64
	// Write streams the shard's batches into w. It must not Commit or Abort w.
	// It may write nothing (an empty shard is committed).
	Write func(ctx context.Context, w *ShardWriter) error
}

// WriteBatch is a Task.Write that writes the one batch build returns and
// releases it.
func WriteBatch(build func() arrow.RecordBatch) func(ctx context.Context, w *ShardWriter) error {
	return func(_ context.Context, w *ShardWriter) error {
		rec := build()
		defer rec.Release()
		return w.Write(rec)
	}
}

// MapShards runs tasks with at most e.Parallelism at once, each writing one
// shard that is committed atomically and recorded in the stage manifest.
// An input that is a committed shard of the run must be the file its
// manifest recorded (sha256 and row count; see CheckShard), or the task
// fails naming it.
// Tasks whose shard is already committed with the same input fingerprints
// (and whose file is still there with the recorded size) are skipped, so a
// rerun after a crash or Ctrl-C resumes. The first error cancels the rest;
// shards committed before it stay committed.
func (e *Env) MapShards(ctx context.Context, tasks []Task) error {
	m, err := e.Out.Manifest(e.Stage)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var total int64
	for _, t := range tasks {
		if seen[t.Output] {
			return fmt.Errorf("stage %s: two tasks write %s", e.Stage, t.Output)
		}
		seen[t.Output] = true
		total += t.Rows
	}
	prog := e.NewProgress(e.Stage, total)
	defer prog.Done()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(e.Parallelism, 1))
	for _, t := range tasks {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			return e.runTask(gctx, m, t, prog)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

func (e *Env) runTask(ctx context.Context, m *Manifest, t Task, prog *Progress) error {
	if err := ctx.Err(); err != nil {
		return err // an earlier task failed while this one waited for a slot
	}
	fps := make([]string, len(t.Inputs))
	for i, in := range t.Inputs {
		fp, err := e.Fingerprint(in)
		if err != nil {
			return fmt.Errorf("stage %s: %s: %w", e.Stage, t.Output, err)
		}
		if err := e.checkInput(in, fp); err != nil {
			return fmt.Errorf("stage %s: %s: %w", e.Stage, t.Output, err)
		}
		fps[i] = fp
	}
	inputsKey := inputsFingerprint(fps)
	if info, ok := m.Shard(t.Output); ok && info.Inputs == inputsKey {
		if st, err := os.Stat(e.Out.Path(t.Output)); err == nil && st.Size() == info.Bytes {
			e.Log.Debug("skip committed shard", "shard", t.Output, "rows", info.Rows)
			prog.Add(max(t.Rows, 0))
			return nil
		}
	}
	prov := e.Provenance(fps...)
	w, err := CreateShard(e.Out.Path(t.Output), t.Schema, WriteOptions{
		Mem: e.Mem, Provenance: prov, RowGroupRows: e.RowGroupRows, CompressionLevel: e.Compression,
	})
	if err != nil {
		return err
	}
	w.progress = prog
	defer w.Abort()
	if err := t.Write(ctx, w); err != nil {
		return fmt.Errorf("stage %s: %s: %w", e.Stage, t.Output, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	info, err := e.Out.Commit(w, t.Output, prov, inputsKey)
	if err != nil {
		return err
	}
	e.Log.Debug("committed shard", "shard", info.Path, "rows", info.Rows, "bytes", info.Bytes)
	return nil
}

func inputsFingerprint(fps []string) string {
	if len(fps) == 0 {
		return ""
	}
	h := sha256.Sum256([]byte(strings.Join(fps, "\n")))
	return "sha256:" + hex.EncodeToString(h[:])
}

// CountRows sums the row counts in the footers of Parquet files, for
// progress totals.
func CountRows(paths ...string) (int64, error) {
	var n int64
	for _, p := range paths {
		r, err := OpenShard(p, ReadOptions{})
		if err != nil {
			return 0, err
		}
		n += r.NumRows()
		r.Close()
	}
	return n, nil
}

// RunOptions are the process-level things RunStage needs besides the config.
type RunOptions struct {
	Mem    memory.Allocator // nil: memory.DefaultAllocator
	Log    *slog.Logger     // nil: slog.Default()
	Stderr io.Writer        // progress output; nil: os.Stderr
	// Follower runs the stage as a non-leading rank of a data-parallel
	// group (`evolm run` under torchrun): the leading rank (rank 0) holds
	// the stage lock, cleans temp files, applies pipeline.fresh and checks
	// the manifest; a follower does none of that and must write nothing to
	// the run directory but what the stage coordinates with its leader.
	Follower bool
}

// RunDir resolves the run directory from run.dir, or run.root/run.name.
func RunDir(cfg *Config) string {
	if d := cfg.String("run.dir"); d != "" {
		return d
	}
	return filepath.Join(cfg.String("run.root"), cfg.String("run.name"))
}

// NewEnv builds the Env of stage name from the merged config: it opens the
// run directory and applies pipeline.* settings. RunStage calls it; tests may
// call it to run a stage by hand.
func NewEnv(name string, cfg *Config, opts RunOptions) (*Env, error) {
	if opts.Mem == nil {
		opts.Mem = memory.DefaultAllocator
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	run, err := OpenRun(RunDir(cfg))
	if err != nil {
		return nil, err
	}
	p := cfg.Section("pipeline")
	spec, _ := Lookup(name)
	section := StageView(cfg, spec)
	return &Env{
		Stage:        name,
		Run:          run,
		Out:          run,
		Mem:          opts.Mem,
		Log:          opts.Log.With("stage", name),
		Config:       section,
		ConfigHash:   section.HashExcept(spec.Volatile...),
		Global:       cfg,
		Parallelism:  max(p.Int("parallelism"), 1),
		BatchSize:    int64(p.Int("batch_size")),
		RowGroupRows: int64(p.Int("row_group_rows")),
		Compression:  p.Int("compression_level"),
		ProgressMode: ProgressMode(p.String("progress"), opts.Stderr),
		Stderr:       opts.Stderr,
	}, nil
}

// RunStage builds the registered stage name from cfg and runs it in its run
// directory. It holds the stage's lock in the run (LockStage) throughout.
// Before Run it completes a swap of staged output that a crash interrupted
// (see FreshDir), removes stale temp files under the stage's output tables
// (only those of dead writers) and checks that committed shards were made
// with the same config. pipeline.fresh (or a changed config of a stage whose
// Spec.Replace is set) writes the new output beside the old, in a staging
// run, and swaps it in only once the stage has succeeded: a failed --fresh
// leaves the old output as it was.
func RunStage(ctx context.Context, name string, cfg *Config, opts RunOptions) error {
	spec, ok := Lookup(name)
	if !ok {
		return fmt.Errorf("no stage %q (see `evolm stages`)", name)
	}
	if err := spec.checkRequired(cfg.Section("stages." + name)); err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	cfg, err := withBase(cfg, spec, opts.Log)
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	st, err := spec.New(StageView(cfg, spec))
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	env, err := NewEnv(name, cfg, opts)
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	if opts.Follower {
		if err := st.Run(ctx, env); err != nil {
			return fmt.Errorf("stage %s: %w", name, err)
		}
		return nil
	}
	unlock, err := env.Run.LockStage(name)
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	defer unlock()
	staged, err := env.prepare(spec, cfg.Bool("pipeline.fresh"))
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	start := time.Now()
	env.Log.Info("start", "run", env.Run.Dir, "config", env.ConfigHash)
	if err := st.Run(ctx, env); err != nil {
		keep := "committed shards are kept; rerun to resume"
		if staged {
			keep = "the previous output is untouched; the new shards committed so far are kept beside it: rerun the same command to resume"
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return fmt.Errorf("stage %s: interrupted (%s): %w", name, keep, err)
		}
		if staged {
			return fmt.Errorf("stage %s: %w\n(%s)", name, err, keep)
		}
		return fmt.Errorf("stage %s: %w", name, err)
	}
	if err := env.checkFailures(cfg.Float("pipeline.warn_failure_fraction")); err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	if staged {
		if err := env.commitStaged(spec.Dirs); err != nil {
			return fmt.Errorf("stage %s: %w", name, err)
		}
		env.Out = env.Run
	}
	m, err := env.Run.Manifest(name)
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	env.Log.Info("done", "shards", len(m.Shards), "rows", m.Rows(""), "elapsed", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// withBase applies the stage's base config (Spec.Base), logging it and
// each key the command changed from it.
func withBase(cfg *Config, spec Spec, log *slog.Logger) (*Config, error) {
	if spec.Base == nil {
		return cfg, nil
	}
	path := spec.Base(StageView(cfg, spec))
	if path == "" {
		return cfg, nil
	}
	out, changes, err := cfg.WithBase(path, spec.Uses)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	log.Info("settings start from "+path, "stage", spec.Name, "sections", strings.Join(spec.Uses, ", "), "changed", len(changes))
	for _, c := range changes {
		log.Info("setting changed from "+path, "stage", spec.Name, "key", c.Key, "now", fmtValue(c.Now), "from", c.NowSource, "was", fmtValue(c.Base))
	}
	return out, nil
}

// prepare readies the run directory for the stage under its lock: it
// finishes an interrupted swap, removes stale temp files, decides where the
// stage writes (stageOut) and refuses committed shards made with another
// config. It reports whether the stage writes to a staging run.
func (e *Env) prepare(spec Spec, fresh bool) (bool, error) {
	if done, err := e.Run.finishStaged(e.Stage); err != nil {
		return false, err
	} else if done {
		e.Log.Info("completed the swap of a --fresh output that a crash interrupted")
	}
	if n, err := e.Run.CleanTemp(append([]string{"_manifests"}, spec.Outputs...)...); err != nil {
		return false, err
	} else if n > 0 {
		e.Log.Info("removed stale temp files", "count", n)
	}
	m, err := e.Run.Manifest(e.Stage)
	if err != nil {
		return false, err
	}
	if !fresh && spec.Replace && len(m.Shards) > 0 && m.ConfigHash != e.ConfigHash {
		e.Log.Info("settings changed: the new output replaces the old once it is complete", "was", m.ConfigHash, "now", e.ConfigHash)
		fresh = true
	}
	staged, err := e.stageOut(fresh)
	if err != nil {
		return false, err
	}
	if staged {
		if m, err = e.Out.Manifest(e.Stage); err != nil {
			return false, err
		}
	}
	switch {
	case len(m.Shards) == 0:
	case m.ConfigHash != e.ConfigHash:
		return false, fmt.Errorf("run %s holds shards made with config %s, now %s: rerun with --fresh to redo them (the committed shards stay until the new ones are complete), or use another --run",
			e.Run.Dir, m.ConfigHash, e.ConfigHash)
	case !staged:
		e.Log.Info("resuming", "committed_shards", len(m.Shards), "rows", m.Rows(""))
	}
	e.before = map[string]ShardInfo{}
	for _, s := range m.Shards {
		e.before[s.Path] = s
	}
	return staged, nil
}

// WorkDir returns (and creates) the stage's scratch directory in the run,
// _work/<stage>, for spill files such as disk-backed buckets. The pipeline
// never reads it; the stage owns its contents and cleanup.
func (e *Env) WorkDir() (string, error) {
	d := filepath.Join(e.Run.Dir, "_work", e.Stage)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("stage %s: work dir: %w", e.Stage, err)
	}
	return d, nil
}

// MapBatches streams the batches of the Parquet file in through fn into w:
// the body of a Task that transforms one input shard into one output shard.
// fn returns a new batch (which MapBatches releases) or nil to drop the batch.
func MapBatches(ctx context.Context, in string, opts ReadOptions, w *ShardWriter, fn func(arrow.RecordBatch) (arrow.RecordBatch, error)) error {
	for rec, err := range ReadShard(ctx, in, opts) {
		if err != nil {
			return err
		}
		out, err := fn(rec)
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		if out == nil {
			continue
		}
		err = w.Write(out)
		out.Release()
		if err != nil {
			return err
		}
	}
	return nil
}
