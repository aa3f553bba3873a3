package track

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/evolm/evolm/pipeline"
)

func init() { Register("wandb", openWandb) }

//go:embed wandb_sidecar.py
var sidecarSource []byte

// W&B has no Go SDK, and evolm does not reimplement its protocol: it runs
// the wandb package itself in a sidecar process (wandb_sidecar.py, embedded
// and written to <run>/trackers/), fed one JSON line per step. That is the
// SDK every W&B user runs, so online runs, offline runs (wandb_mode
// offline: no network; `wandb sync <run>/trackers/wandb/offline-run-*`
// uploads them later), entities, W&B's own retries and its system metrics
// (of the evolm process) behave as they do from Python. W&B's TensorBoard
// sync was the other way: `wandb sync` no longer takes TensorBoard logs
// (0.31 has no --sync-tensorboard), and the live route goes through a
// private wandb API and logs TensorBoard's step as a metric beside W&B's
// own counter.
//
// The sidecar starts with the run: a Python without wandb, or an online
// run without an API key, stops the run before its first step. The run's
// W&B id is kept in <run>/trackers/wandb.json, and a resumed run continues
// it, sending nothing at or before the last step W&B holds (the sidecar
// reads it from the resumed run online, and from the run's earlier offline
// files offline, where W&B keeps every step it is sent). Should the
// sidecar die mid-run, the next write starts another, which resumes the
// same W&B run. Its stderr (wandb's messages) goes to
// <run>/trackers/wandb_sidecar.log.
type wandbSink struct {
	s      Settings
	r      Run
	python string
	script string
	id     string
	last   int64 // the last step W&B holds

	cmd     *exec.Cmd
	in      io.WriteCloser
	replies chan string
	exited  chan struct{}
	stderr  *os.File
}

type wandbState struct {
	ID      string `json:"id"`
	Project string `json:"project"`
	Entity  string `json:"entity,omitempty"`
}

// WandbPython returns the interpreter the sidecar runs with: the setting,
// else $EVOLM_PYTHON, else python3.
func WandbPython(s Settings) string {
	switch {
	case s.WandbPython != "":
		return s.WandbPython
	case os.Getenv("EVOLM_PYTHON") != "":
		return os.Getenv("EVOLM_PYTHON")
	}
	return "python3"
}

func openWandb(ctx context.Context, s Settings, r Run) (Sink, int64, error) {
	if s.WandbMode != "online" && s.WandbMode != "offline" {
		return nil, 0, fmt.Errorf("wandb_mode %q: want online or offline", s.WandbMode)
	}
	w := &wandbSink{s: s, r: r, python: WandbPython(s), script: filepath.Join(r.StateDir(), "wandb_sidecar.py"), last: -1}
	var st wandbState
	ok, err := loadState(r, "wandb", &st)
	if err != nil {
		return nil, 0, err
	}
	if !ok || st.Project != s.WandbProject || st.Entity != s.WandbEntity {
		st = wandbState{ID: newID(), Project: s.WandbProject, Entity: s.WandbEntity}
		if err := saveState(r, "wandb", st); err != nil {
			return nil, 0, err
		}
	}
	w.id = st.ID
	if err := pipeline.WriteFileAtomic(w.script, sidecarSource); err != nil {
		return nil, 0, err
	}
	if err := w.start(ctx); err != nil {
		return nil, 0, err
	}
	return w, w.last, nil
}

// start runs the sidecar and initializes the W&B run (resuming it).
func (w *wandbSink) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(w.r.StateDir(), "wandb_sidecar.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(w.python, w.script)
	cmd.Stderr = logf
	// Its own process group: a Ctrl-C in the terminal reaches evolm, which
	// ends the W&B run itself; a killed evolm closes the sidecar's stdin,
	// and the sidecar finishes the run with what it was sent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting the W&B sidecar with %s: %w (set %s to a Python with wandb==0.31.0)", w.python, err, w.s.key("wandb_python"))
	}
	w.cmd, w.in, w.stderr = cmd, in, logf
	w.replies, w.exited = make(chan string, 4), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			w.replies <- sc.Text()
		}
		_ = cmd.Wait()
		logf.Close()
		close(w.exited)
	}()
	var tags []string
	for k, v := range w.s.Tags {
		tags = append(tags, k+"="+v)
	}
	slices.Sort(tags)
	config := map[string]any{"evolm.version": w.r.Version, "evolm.config_hash": w.r.ConfigHash, "evolm.run_dir": w.r.Dir}
	for _, p := range w.r.Params {
		config[p.Key] = p.Value
	}
	init := map[string]any{"op": "init", "project": w.s.WandbProject, "entity": w.s.WandbEntity, "id": w.id, "name": w.s.RunName,
		"mode": w.s.WandbMode, "dir": w.r.StateDir(), "tags": tags, "config": config, "pid": os.Getpid()}
	b, err := json.Marshal(init)
	if err != nil {
		return err
	}
	var rep struct {
		OK       bool   `json:"ok"`
		Error    string `json:"error"`
		LastStep int64  `json:"last_step"`
	}
	if err := w.request(ctx, append(b, '\n'), &rep); err != nil {
		w.kill()
		return fmt.Errorf("W&B sidecar (%s): %w%s", w.python, err, w.logTail())
	}
	if !rep.OK {
		w.kill()
		msg := rep.Error
		switch {
		case strings.Contains(msg, "cannot import wandb"):
			msg += " (install it: pip install -c scripts/constraints.txt wandb==0.31.0, or set " + w.s.key("wandb_python") + ")"
		case strings.Contains(strings.ToLower(msg), "api key"):
			msg += " (set WANDB_API_KEY or run `wandb login`; or set " + w.s.key("wandb_mode") + ": offline and upload later with `wandb sync " +
				filepath.Join(w.r.StateDir(), "wandb", "offline-run-*") + "`)"
		}
		return errors.New(msg)
	}
	w.last = max(w.last, rep.LastStep)
	return nil
}

// request writes line and waits for the sidecar's reply, decoded into out.
func (w *wandbSink) request(ctx context.Context, line []byte, out any) error {
	if _, err := w.in.Write(line); err != nil {
		return err
	}
	select {
	case rep := <-w.replies:
		return json.Unmarshal([]byte(rep), out)
	case <-w.exited:
		return fmt.Errorf("the sidecar exited (%v)", w.cmd.ProcessState)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// alive reports whether the sidecar still runs.
func (w *wandbSink) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return w.cmd != nil
	}
}

func (w *wandbSink) kill() {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		<-w.exited
	}
}

// Abort kills the sidecar, ending a write to it that blocks (hub: a sidecar
// that stopped reading); the next write or Close starts or skips it.
func (w *wandbSink) Abort() {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// logTail is the end of the sidecar's stderr log, for an error message.
func (w *wandbSink) logTail() string {
	b, _ := os.ReadFile(filepath.Join(w.r.StateDir(), "wandb_sidecar.log"))
	if len(b) == 0 {
		return ""
	}
	return "\n" + string(b[max(0, len(b)-2000):])
}

// Write sends each step's metrics as one run.log and checkpoint paths to
// the run's summary. A sidecar that died is started again first.
func (w *wandbSink) Write(ctx context.Context, evs []Event) error {
	if !w.alive() {
		if err := w.start(ctx); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	for _, e := range evs {
		switch e.Kind {
		case Scalars:
			if e.Step <= w.last {
				continue
			}
			buf.WriteString(`{"op":"log","step":`)
			buf.WriteString(strconv.FormatInt(e.Step, 10))
			buf.WriteString(`,"metrics":{`)
			for i, p := range e.Points {
				if i > 0 {
					buf.WriteByte(',')
				}
				k, _ := json.Marshal(p.Tag)
				buf.Write(k)
				buf.WriteByte(':')
				buf.WriteString(pyFloat(p.Value))
			}
			buf.WriteString("}}\n")
		case Checkpoint:
			b, _ := json.Marshal(map[string]any{"op": "summary", "values": map[string]any{"checkpoints/" + e.Tag: e.Text, "checkpoint": e.Text}})
			buf.Write(append(b, '\n'))
		}
	}
	if _, err := w.in.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("W&B sidecar: %w%s", err, w.logTail())
	}
	for _, e := range evs {
		if e.Kind == Scalars {
			w.last = max(w.last, e.Step)
		}
	}
	return nil
}

// pyFloat writes v as Python's json module reads it (NaN and Infinity
// included).
func pyFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Close finishes the W&B run and waits for the sidecar to exit.
func (w *wandbSink) Close(ctx context.Context, status Status) error {
	if !w.alive() {
		return nil
	}
	code := 0
	if status != Finished {
		code = 1
	}
	var rep struct {
		OK bool `json:"ok"`
	}
	err := w.request(ctx, []byte(fmt.Sprintf(`{"op":"finish","exit_code":%d}`+"\n", code)), &rep)
	_ = w.in.Close()
	select {
	case <-w.exited:
	case <-ctx.Done():
		w.kill()
	case <-time.After(30 * time.Second):
		w.kill()
	}
	if err != nil {
		return fmt.Errorf("W&B sidecar: finish: %w%s", err, w.logTail())
	}
	return nil
}
