package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// Engine is one servable model: what the requests that name it run on.
type Engine struct {
	Generator backend.Generator // required
	// Scorer serves /v1/evolm/score for this model; nil: the Generator when
	// it is also a backend.Scorer, else the route answers 404 for it.
	Scorer backend.Scorer
	// RenderChat renders a conversation to prompt text (Config.RenderChat).
	RenderChat func([]backend.Message) (string, error)
	// Close frees the engine once no request uses it any more; nil: nothing
	// to free.
	Close func()
}

// Loader loads engines while the server runs: the runtime weight updates
// of an RL learner (Config.Loader).
type Loader interface {
	// LoadAdapter returns the current base model with the LoRA adapter of
	// directory path attached (vLLM's /v1/load_lora_adapter).
	LoadAdapter(path string) (*Engine, error)
	// LoadWeights returns the checkpoint of directory path, which replaces
	// the base model (SGLang's /update_weights_from_disk). loadFormat is
	// the request's load_format ("" when absent). Adapters loaded later
	// attach to it.
	LoadWeights(path, loadFormat string) (*Engine, error)
}

// entry is a served model: the base model or a loaded adapter. Requests
// hold a reference while they run, so that an unloaded or replaced model is
// freed only when its last request ends.
type entry struct {
	id      string
	root    string // the directory it was loaded from ("" unknown)
	parent  string // an adapter's base model id
	created int64
	// version is SGLang's weight_version: the label of the update that
	// loaded it, "default" before any.
	version string
	eng     Engine
	gen     backend.Generator // eng.Generator, batched (Config.MaxBatch)
	score   backend.Scorer    // eng.Scorer, batched alike; nil: none
	refs    int
	retired bool
}

// registry is the set of served models.
type registry struct {
	mu       sync.Mutex
	base     *entry
	adapters map[string]*entry
	// loading serializes the update routes: one load at a time, as vLLM's
	// and SGLang's model-update locks do.
	loading sync.Mutex
	log     *slog.Logger
}

func (s *server) newEntry(id, root, parent string, eng Engine) *entry {
	e := &entry{id: id, root: root, parent: parent, created: time.Now().Unix(), version: "default", eng: eng, gen: eng.Generator}
	if e.eng.Scorer == nil {
		e.eng.Scorer, _ = eng.Generator.(backend.Scorer)
	}
	e.score = e.eng.Scorer
	if s.cfg.MaxBatch > 1 {
		e.gen = backend.NewBatcher(eng.Generator, s.cfg.MaxBatch, s.cfg.BatchRunners)
		if e.score != nil {
			// One score call at a time: an engine runs a Score call as one
			// turn, so a second call in flight would only split the queue
			// that the next call takes whole.
			e.score = backend.NewScoreBatcher(e.eng.Scorer, s.cfg.MaxBatch, 1)
		}
	}
	return e
}

// acquire returns the model a request names ("" is the base model) with a
// reference held; release it. An unknown name is a 404, as vLLM answers it.
func (r *registry) acquire(name string) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.base
	if name != "" && name != r.base.id {
		e = r.adapters[name]
	}
	if e == nil {
		have := []string{strconv.Quote(r.base.id)}
		for n := range r.adapters {
			have = append(have, strconv.Quote(n))
		}
		sort.Strings(have[1:])
		return nil, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			msg: fmt.Sprintf("the model %q does not exist; this server serves %s", name, strings.Join(have, ", "))}
	}
	e.refs++
	return e, nil
}

func (r *registry) release(e *entry) {
	r.mu.Lock()
	e.refs--
	free := e.retired && e.refs == 0
	r.mu.Unlock()
	if free {
		r.free(e)
	}
}

// retire takes e out of service; it is freed when its last request ends.
// Called with r.mu held.
func (r *registry) retireLocked(e *entry) (freeNow bool) {
	e.retired = true
	return e.refs == 0
}

func (r *registry) free(e *entry) {
	if e.eng.Close != nil {
		e.eng.Close()
	}
	r.log.Info("serve: model freed", "model", e.id)
}

func (r *registry) list() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []*entry{r.base}
	for _, e := range r.adapters {
		out = append(out, e)
	}
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].id < out[1+j].id })
	return out
}

// loadLoRAAdapter is vLLM's POST /v1/load_lora_adapter: it loads the
// adapter at lora_path under lora_name and answers 200 with a plain-text
// success line; a name already loaded is a 400 unless load_inplace.
func (s *server) loadLoRAAdapter(w http.ResponseWriter, r *http.Request) {
	var req openai.LoadLoRAAdapterRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.LoraName == "" || req.LoraPath == "" {
		s.fail(w, r, &apiError{status: http.StatusBadRequest, typ: "InvalidUserInput",
			msg: "Both 'lora_name' and 'lora_path' must be provided."})
		return
	}
	reg := s.reg
	reg.loading.Lock()
	defer reg.loading.Unlock()
	reg.mu.Lock()
	_, exists := reg.adapters[req.LoraName]
	clash := req.LoraName == reg.base.id
	reg.mu.Unlock()
	if clash || (exists && !req.LoadInplace) {
		s.fail(w, r, &apiError{status: http.StatusBadRequest, typ: "InvalidUserInput",
			msg: fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.LoraName)})
		return
	}
	t0 := time.Now()
	var eng *Engine
	var err error
	if failpoint.Active("serve-load-adapter") { // fault tests: a server that cannot load the adapter
		err = errors.New("injected fault (EVOLM_FAILPOINT serve-load-adapter)")
	} else {
		eng, err = s.cfg.Loader.LoadAdapter(req.LoraPath)
	}
	if err != nil {
		s.fail(w, r, &apiError{status: http.StatusBadRequest, typ: "InvalidUserInput",
			msg: fmt.Sprintf("Failed to load LoRA adapter '%s' from %s: %v", req.LoraName, req.LoraPath, err)})
		return
	}
	reg.mu.Lock()
	e := s.newEntry(req.LoraName, req.LoraPath, reg.base.id, *eng)
	old := reg.adapters[req.LoraName]
	reg.adapters[req.LoraName] = e
	freeOld := old != nil && reg.retireLocked(old)
	reg.mu.Unlock()
	if freeOld {
		reg.free(old)
	}
	s.log.Info("serve: LoRA adapter loaded", "name", req.LoraName, "path", req.LoraPath, "seconds", time.Since(t0).Seconds())
	writeText(w, http.StatusOK, fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", req.LoraName))
}

// unloadLoRAAdapter is vLLM's POST /v1/unload_lora_adapter; an unknown name
// is a 404.
func (s *server) unloadLoRAAdapter(w http.ResponseWriter, r *http.Request) {
	var req openai.UnloadLoRAAdapterRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.LoraName == "" {
		s.fail(w, r, &apiError{status: http.StatusBadRequest, typ: "InvalidUserInput", msg: "'lora_name' needs to be provided to unload a LoRA adapter."})
		return
	}
	reg := s.reg
	reg.loading.Lock()
	defer reg.loading.Unlock()
	reg.mu.Lock()
	e := reg.adapters[req.LoraName]
	var freeNow bool
	if e != nil {
		delete(reg.adapters, req.LoraName)
		freeNow = reg.retireLocked(e)
	}
	reg.mu.Unlock()
	if e == nil {
		s.fail(w, r, &apiError{status: http.StatusNotFound, typ: "NotFoundError",
			msg: fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoraName)})
		return
	}
	if freeNow {
		reg.free(e)
	}
	s.log.Info("serve: LoRA adapter unloaded", "name", req.LoraName)
	writeText(w, http.StatusOK, fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", req.LoraName))
}

// updateWeightsFromDisk is SGLang's POST /update_weights_from_disk: it
// loads the checkpoint at model_path in place of the base model and answers
// {"success", "message", "num_paused_requests"} (200, or 400 on failure).
// As SGLang does, the served model's name becomes model_path. Requests in
// flight finish on the old weights; adapters stay loaded on the weights
// they were loaded with.
func (s *server) updateWeightsFromDisk(w http.ResponseWriter, r *http.Request) {
	var req openai.UpdateWeightsFromDiskRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	answer := func(status int, ok bool, msg string) {
		writeJSON(w, status, openai.UpdateWeightsFromDiskResponse{Success: ok, Message: msg})
	}
	if req.ModelPath == "" {
		answer(http.StatusBadRequest, false, "model_path is required")
		return
	}
	format := ""
	if req.LoadFormat != nil {
		format = *req.LoadFormat
	}
	reg := s.reg
	reg.loading.Lock()
	defer reg.loading.Unlock()
	t0 := time.Now()
	var eng *Engine
	var err error
	if failpoint.Active("serve-update-weights") { // fault tests
		err = errors.New("injected fault (EVOLM_FAILPOINT serve-update-weights)")
	} else {
		eng, err = s.cfg.Loader.LoadWeights(req.ModelPath, format)
	}
	if err != nil {
		s.log.Warn("serve: weight update failed", "model_path", req.ModelPath, "error", err.Error())
		answer(http.StatusBadRequest, false, fmt.Sprintf("Failed to update weights: %v. Rolled back to the original weights.", err))
		return
	}
	reg.mu.Lock()
	old := reg.base
	reg.base = s.newEntry(req.ModelPath, req.ModelPath, "", *eng)
	if req.WeightVersion != nil {
		reg.base.version = *req.WeightVersion
	}
	freeOld := reg.retireLocked(old)
	reg.mu.Unlock()
	if freeOld {
		reg.free(old)
	}
	s.log.Info("serve: weights updated from disk", "model_path", req.ModelPath, "seconds", time.Since(t0).Seconds())
	msg := "Succeeded to update model weights."
	if req.WeightVersion != nil {
		msg += fmt.Sprintf(" Weight version updated to %s.", *req.WeightVersion)
	}
	answer(http.StatusOK, true, msg)
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text))
}

// closeAll frees every served model (server shutdown).
func (r *registry) closeAll() error {
	r.mu.Lock()
	es := []*entry{r.base}
	for _, e := range r.adapters {
		es = append(es, e)
	}
	r.adapters = map[string]*entry{}
	r.mu.Unlock()
	var errs []error
	for _, e := range es {
		if e.eng.Close != nil {
			e.eng.Close()
		}
	}
	return errors.Join(errs...)
}
