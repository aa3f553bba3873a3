package run

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/schedule"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/roles"
)

var ckptRE = regexp.MustCompile(`^step-(\d{6})$`)

func ckptName(step int) string   { return fmt.Sprintf("step-%06d", step) }
func ckptDir(name string) string { return "checkpoints/" + name }

// A checkpoint holds, per trained role (policy; rubric_generator in the
// two-model ablation), what its Trainer saved — <role>/ (an HF checkpoint,
// or a LoRA adapter) and <role>_optimizer.safetensors — beside
// replay.parquet and state.json.
const optimizerSuffix = "_optimizer.safetensors"

// roleDir is a role's directory in checkpoint name, relative to the run
// directory (its optimizer file: loop.optimizerName).
func roleDir(name, role string) string { return ckptDir(name) + "/" + role }

// latestCheckpoint finds the newest complete checkpoint (one with
// state.json, written last) and returns the step to resume at and its name
// ("" and 0 when there is none). Temp directories of an interrupted
// checkpoint are removed.
func (l *loop) latestCheckpoint() (int, string, error) {
	dir := l.env.Out.Path("checkpoints")
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("checkpoints: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if len(e.Name()) > 0 && e.Name()[0] == '.' {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return 0, "", fmt.Errorf("checkpoints: removing interrupted %s: %w", e.Name(), err)
			}
			l.env.Log.Info("removed an interrupted checkpoint", "dir", e.Name())
			continue
		}
		if ckptRE.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for i := len(names) - 1; i >= 0; i-- {
		p := filepath.Join(dir, names[i], "state.json")
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			l.env.Log.Warn("checkpoint without state.json ignored", "checkpoint", names[i])
			continue
		}
		if err != nil {
			return 0, "", fmt.Errorf("checkpoint %s: %w", p, err)
		}
		var st schedule.State
		if err := json.Unmarshal(b, &st); err != nil {
			return 0, "", fmt.Errorf("checkpoint %s: corrupt state.json: %w", p, err)
		}
		if st.Version != schedule.StateVersion && st.Version != 1 {
			return 0, "", fmt.Errorf("checkpoint %s: state version %d, want %d", p, st.Version, schedule.StateVersion)
		}
		if st.Version == 1 {
			l.env.Log.Warn("checkpoint without checksums (state version 1): its files are not verified", "checkpoint", names[i])
		} else if err := verifyChecksums(filepath.Join(dir, names[i]), st.Files); err != nil {
			return 0, "", fmt.Errorf("checkpoint %s: %w: restore the checkpoint, remove it to resume from an earlier one, or start over with --fresh", filepath.Join(dir, names[i]), err)
		}
		if st.ConfigHash != l.env.ConfigHash {
			return 0, "", fmt.Errorf("checkpoint %s was made with config %s, the run's config is now %s: resume with the run's own config (evolm run --resume %s), or start over with --fresh",
				p, st.ConfigHash, l.env.ConfigHash, l.env.Run.Dir)
		}
		if st.Seed != l.cfg.Seed {
			return 0, "", fmt.Errorf("checkpoint %s was made with seed %d, config has %d: resume with the run's own config (evolm run --resume %s)", p, st.Seed, l.cfg.Seed, l.env.Run.Dir)
		}
		if st.Shared != l.cfg.RubricGen.Shared {
			return 0, "", fmt.Errorf("checkpoint %s: shared_model=%v does not match the config's roles.rubric_generator.model", p, st.Shared)
		}
		if ws := max(st.WorldSize, 1); st.ZeRO > 0 && ws > 1 && ws != l.world() {
			return 0, "", fmt.Errorf("checkpoint %s was written by %d data-parallel ranks at zero_stage %d (the optimizer state is sharded in %d files); this run has %d: resume with --nproc %d (or torchrun with %d processes), or start over with --fresh",
				p, ws, st.ZeRO, ws, l.world(), ws, ws)
		}
		n, _ := strconv.Atoi(ckptRE.FindStringSubmatch(names[i])[1])
		if n != st.NextStep {
			return 0, "", fmt.Errorf("checkpoint %s: directory says step %d, state.json says %d", p, n, st.NextStep)
		}
		l.skipped = st.SkippedInARow
		return st.NextStep, names[i], nil
	}
	return 0, "", nil
}

// stateFile is the checkpoint file that holds the checksums of the others.
const stateFile = "state.json"

// checksumDir returns the sha256 of every regular file under dir but
// state.json, by slash-separated relative path.
func checksumDir(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == stateFile {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", rel)
		}
		fp, err := pipeline.Fingerprint(p)
		if err != nil {
			return err
		}
		out[rel] = fp
		return nil
	})
	return out, err
}

// verifyChecksums checks that dir holds exactly the files of want (but
// state.json) with their checksums, naming every one that differs, is
// missing or was added.
func verifyChecksums(dir string, want map[string]string) error {
	got, err := checksumDir(dir)
	if err != nil {
		return err
	}
	var bad []string
	for rel, fp := range want {
		switch g, ok := got[rel]; {
		case !ok:
			bad = append(bad, rel+": missing")
		case g != fp:
			bad = append(bad, fmt.Sprintf("%s: %s, state.json recorded %s (edited or replaced)", rel, g, fp))
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			bad = append(bad, rel+": not in state.json (added after the checkpoint was written)")
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("files do not match the checksums in state.json:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// checkpointHook is the loop's checkpointing hook: a checkpoint every
// checkpoint_every steps and after the last step.
func (l *loop) checkpointHook(ctx context.Context, step int, _ *schemas.StepMetrics) error {
	if (step+1)%l.cfg.CheckpointEvery == 0 || step+1 == l.cfg.Steps {
		return l.checkpoint(ctx, step+1)
	}
	return nil
}

// checkpoint writes checkpoints/step-NNNNNN for the state after step next−1:
// what each trained role's Trainer saves (weights or adapter, optimizer
// state), the replay buffer, then state.json; in a temp directory renamed
// into place.
func (l *loop) checkpoint(ctx context.Context, next int) error {
	name := ckptName(next)
	final := l.env.Out.Path(ckptDir(name))
	trainedRoles := map[string]*roles.Trained{roles.Policy: l.policy}
	if l.rubric != l.policy {
		trainedRoles[roles.RubricGenerator] = l.rubric
	}
	var tmp string
	if l.lead() {
		if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
			return err
		}
		var err error
		if l.dp == nil {
			tmp, err = os.MkdirTemp(filepath.Dir(final), "."+name+".tmp-")
		} else {
			// Every rank writes its optimizer shard here: a name they all know.
			tmp = filepath.Join(filepath.Dir(final), "."+name+".tmp-dp")
			if err = os.RemoveAll(tmp); err == nil {
				err = os.Mkdir(tmp, 0o755)
			}
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", name, err)
		}
		defer os.RemoveAll(tmp) // no-op after the rename
		for rname, r := range trainedRoles {
			if _, err := r.Trainer.Save(ctx, filepath.Join(tmp, rname)); err != nil {
				return fmt.Errorf("checkpoint %s: %w", name, err)
			}
		}
	}
	if err := l.barrier("checkpoint " + name); err != nil {
		return err
	}
	if l.dp != nil {
		tmp = filepath.Join(filepath.Dir(final), "."+name+".tmp-dp")
	}
	if l.lead() || l.shardedOptimizer() {
		for rname, r := range trainedRoles {
			if err := r.Trainer.SaveOptimizer(filepath.Join(tmp, l.optimizerName(rname))); err != nil {
				return fmt.Errorf("checkpoint %s: optimizer: %w", name, err)
			}
		}
	}
	failpoint.Hit("checkpoint-mid")
	if err := l.barrier("checkpoint " + name); err != nil {
		return err
	}
	l.ckpt = name
	if !l.lead() {
		return nil
	}
	if err := saveBuffer(l.buf, filepath.Join(tmp, "replay.parquet"), l.env.Mem); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	files, err := checksumDir(tmp)
	if err != nil {
		return fmt.Errorf("checkpoint %s: checksums: %w", name, err)
	}
	st := schedule.State{Version: schedule.StateVersion, NextStep: next, Seed: l.cfg.Seed, ConfigHash: l.env.ConfigHash,
		DataPosition: l.cfg.Schedule().Position(next), Shared: l.rubric == l.policy, CodeVersion: pipeline.CodeVersion(),
		SkippedInARow: l.skipped, Files: files}
	if l.dp != nil {
		st.WorldSize, st.ZeRO = l.world(), l.cfg.ZeRO
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := pipeline.WriteFileAtomic(filepath.Join(tmp, stateFile), append(b, '\n')); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := os.RemoveAll(final); err != nil { // a stale one from a recomputed step
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := pipeline.SyncDir(filepath.Dir(final)); err != nil {
		return err
	}
	l.env.Log.Info("checkpoint", "dir", final, "next_step", next)
	return nil
}

// saveBuffer writes the replay buffer to path atomically as one Parquet shard.
func saveBuffer(b *pairs.Buffer, path string, mem memory.Allocator) error {
	w, err := pipeline.CreateShard(path, schemas.Replay.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		return fmt.Errorf("replay buffer: %w", err)
	}
	rec := schemas.Replay.Build(mem, b.Entries())
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		_ = w.Abort()
		return fmt.Errorf("replay buffer: %w", err)
	}
	if _, err := w.Commit(); err != nil {
		return fmt.Errorf("replay buffer: %w", err)
	}
	return nil
}

// loadBuffer reads a buffer saved by saveBuffer.
func loadBuffer(ctx context.Context, path string, capacity int, mem memory.Allocator) (*pairs.Buffer, error) {
	b, err := pairs.NewBuffer(capacity)
	if err != nil {
		return nil, err
	}
	for rec, err := range pipeline.ReadShard(ctx, path, pipeline.ReadOptions{Schema: schemas.Replay.Schema(), Mem: mem}) {
		if err != nil {
			return nil, fmt.Errorf("replay buffer %s: %w", path, err)
		}
		rows, err := schemas.Replay.Read(rec)
		if err != nil {
			return nil, fmt.Errorf("replay buffer %s: %w", path, err)
		}
		b.Add(rows...)
	}
	return b, nil
}
