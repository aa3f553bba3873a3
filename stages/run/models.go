package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/evolm/evolm/internal/modelprint"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/roles"
)

// modelsFile records, in the run directory, a fingerprint of every model
// the run uses (package modelprint): the policy (whose initial weights are
// also the KL reference, reloaded on resume), a rubric generator of its
// own, and the judge. A resume compares them, so that a model replaced
// since the run started cannot silently change what the rest of the run
// computes.
const modelsFile = "models.json"

// modelsRecord is the content of models.json.
type modelsRecord struct {
	Version int    `json:"version"`
	Method  string `json:"method"` // modelprint.Method
	// Models by config key (roles.policy.model …).
	Models map[string]modelRecord `json:"models"`
}

// modelRecord is one model: its config value and, for a model directory,
// its files' prints; a served model (a name on an inference server) has
// only its name.
type modelRecord struct {
	Model string           `json:"model"`
	Files modelprint.Print `json:"files,omitempty"`
}

// modelPrints fingerprints the run's models as they are now.
func (l *loop) modelPrints() (modelsRecord, error) {
	rec := modelsRecord{Version: 1, Method: modelprint.Method, Models: map[string]modelRecord{}}
	rcs := []roles.Config{l.cfg.Policy, l.cfg.Judge}
	if !l.cfg.RubricGen.Shared {
		rcs = append(rcs, l.cfg.RubricGen)
	}
	for _, rc := range rcs {
		m := modelRecord{Model: rc.Model}
		if st, err := os.Stat(rc.Model); err == nil && st.IsDir() {
			p, err := modelprint.Dir(rc.Model)
			if err != nil {
				return rec, fmt.Errorf("%s: %w", rc.Role, err)
			}
			m.Files = p
		}
		rec.Models[roles.Section(rc.Role)+"."+roles.KeyModel] = m
	}
	return rec, nil
}

// checkModels records the run's model fingerprints (models.json) at a start
// from scratch (ck ""); resuming from checkpoint ck it compares them with
// the recorded ones and refuses a model that changed, naming it and its
// files, unless accept_changed_models is set (then it records the new
// ones).
func (l *loop) checkModels(ck string) error {
	now, err := l.modelPrints()
	if err != nil {
		return err
	}
	path := l.env.Out.Path(modelsFile)
	if ck != "" {
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			l.env.Log.Warn("the run has no models.json (started by an older evolm): its models are recorded now, not checked", "checkpoint", ck)
		case err != nil:
			return fmt.Errorf("%s: %w", path, err)
		default:
			var was modelsRecord
			if err := json.Unmarshal(b, &was); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if changed := diffModels(was, now); len(changed) > 0 {
				if !l.cfg.AcceptChangedModels {
					return fmt.Errorf("resume from checkpoint %s: a model changed since the run started (%s records them):\n  %s\nresume with the models the run started with, start over with --fresh, or pass --accept-changed-models to continue with these deliberately",
						ck, path, strings.Join(changed, "\n  "))
				}
				l.env.Log.Warn("resuming with changed models (accept_changed_models)", "changed", strings.Join(changed, "; "))
			}
		}
	}
	b, err := json.MarshalIndent(now, "", "  ")
	if err != nil {
		return err
	}
	return pipeline.WriteFileAtomic(path, append(b, '\n'))
}

// diffModels lists, per model key, what changed from was to now.
func diffModels(was, now modelsRecord) []string {
	if was.Method != now.Method {
		return nil // another fingerprint method: nothing to compare
	}
	var out []string
	var keys []string
	for k := range now.Models {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		n := now.Models[k]
		w, ok := was.Models[k]
		switch {
		case !ok:
			continue // a model the run did not record (an older run's layout)
		case w.Model != n.Model:
			out = append(out, fmt.Sprintf("%s: %s, was %s", k, n.Model, w.Model))
		default:
			for _, d := range modelprint.Diff(w.Files, n.Files) {
				out = append(out, fmt.Sprintf("%s (%s): %s", k, n.Model, d))
			}
		}
	}
	return out
}
