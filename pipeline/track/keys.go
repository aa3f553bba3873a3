package track

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/evolm/evolm/pipeline"
)

// Keys are the tracker keys of a stage that reports to trackers (the loop,
// stages.run; supervised fine-tuning, stages.sft), declared once: a stage
// embeds Keys in its own keys struct (pipeline.FieldsOf takes an embedded
// struct's keys as the section's own) and turns them into Settings. Each
// may change on resume: a tracker reports the run, it does not change what
// a step computes.
type Keys struct {
	Trackers         []string      `key:"trackers" default:"console" volatile:"true" example:"console,tensorboard,mlflow,wandb" help:"where each step's metrics go besides the steps table: console (the step's log line at info level; without it the line is at debug), tensorboard, mlflow, wandb"`
	TrackerRunName   string        `key:"tracker_run_name" volatile:"true" help:"the run's name in MLflow and W&B; empty: the run directory's name (evolm sft: with -sft appended)"`
	TrackerTags      []string      `key:"tracker_tags" volatile:"true" example:"team=rl,model=qwen3-8b" help:"tags of the tracker runs, key=value"`
	TrackerQueue     int           `key:"tracker_queue" default:"10000" min:"1" max:"10000000" volatile:"true" help:"events each tracker may hold while it is slow or failing; beyond, new ones are dropped (the steps table keeps every row)"`
	TrackerFlush     time.Duration `key:"tracker_flush_timeout" default:"2m" min:"0" volatile:"true" help:"at the end of the run, how long to wait for the trackers to take what is queued"`
	TensorBoardDir   string        `key:"tensorboard_dir" volatile:"true" help:"tensorboard: the run's event-file directory (point tensorboard --logdir at it or its parent); empty: <run>/tensorboard (evolm sft: <run>/tensorboard/sft)"`
	MLflowURI        string        `key:"mlflow_tracking_uri" volatile:"true" example:"http://127.0.0.1:5000" help:"mlflow: the tracking server's URL (mlflow server); empty: $MLFLOW_TRACKING_URI (MLFLOW_TRACKING_TOKEN or _USERNAME/_PASSWORD authenticate)"`
	MLflowExperiment string        `key:"mlflow_experiment" default:"evolm" volatile:"true" help:"mlflow: the experiment the run is logged under (created when missing)"`
	WandbProject     string        `key:"wandb_project" default:"evolm" volatile:"true" help:"wandb: the W&B project"`
	WandbEntity      string        `key:"wandb_entity" volatile:"true" help:"wandb: the W&B entity (user or team); empty: the API key's default"`
	WandbMode        string        `key:"wandb_mode" default:"online" enum:"online,offline" volatile:"true" help:"wandb: online, or offline (no network; upload later with wandb sync <run>/trackers/wandb/offline-run-*, evolm sft's under <run>/trackers/sft/)"`
	WandbPython      string        `key:"wandb_python" volatile:"true" help:"wandb: the Python with the wandb package that runs evolm's W&B sidecar; empty: $EVOLM_PYTHON, else python3"`
}

// Settings turns the keys, read from the stage's config view cfg, into
// Settings, refusing an unknown or repeated tracker, a malformed tag and an
// MLflow tracker with no server; each error names its key in full.
func (k *Keys) Settings(cfg *pipeline.Config) (Settings, error) {
	s := Settings{RunName: k.TrackerRunName, Queue: k.TrackerQueue, FlushTimeout: k.TrackerFlush,
		TensorBoardDir: k.TensorBoardDir, MLflowURI: k.MLflowURI, MLflowExperiment: k.MLflowExperiment,
		WandbProject: k.WandbProject, WandbEntity: k.WandbEntity, WandbMode: k.WandbMode, WandbPython: k.WandbPython}
	for _, n := range k.Trackers {
		if !slices.Contains(Names(), n) {
			return s, cfg.Errorf("trackers", "unknown tracker %q (known: %s)", n, strings.Join(Names(), ", "))
		}
		if slices.Contains(s.Trackers, n) {
			return s, cfg.Errorf("trackers", "%s listed twice", n)
		}
		s.Trackers = append(s.Trackers, n)
	}
	for _, t := range k.TrackerTags {
		key, val, ok := strings.Cut(t, "=")
		if !ok || strings.TrimSpace(key) == "" {
			return s, cfg.Errorf("tracker_tags", "%q: want key=value", t)
		}
		if s.Tags == nil {
			s.Tags = map[string]string{}
		}
		s.Tags[strings.TrimSpace(key)] = val
	}
	if slices.Contains(s.Trackers, "mlflow") && s.MLflowURI == "" && os.Getenv("MLFLOW_TRACKING_URI") == "" {
		return s, cfg.Errorf("mlflow_tracking_uri", "trackers has mlflow: set the tracking server's URL (or MLFLOW_TRACKING_URI)")
	}
	return s, nil
}
