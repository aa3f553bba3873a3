package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/backend"
)

// Engine is one servable model: what the requests that name it run on.
type Engine struct {
	Generator backend.Generator // required
	// Scorer serves /v1/evolm/score for this model; nil: the Generator when
	// it is also a backend.Scorer, else the route answers 404 for it.
	Scorer backend.Scorer
	// RenderChat renders a conversation to prompt text (Config.RenderChat).
	RenderChat func([]chat.Message, chat.Options) (string, error)
	// Tokenizer serves the tokenizer routes for this model
	// (Config.Tokenizer).
	Tokenizer Tokenizer
	// Close frees the engine once no request uses it any more; nil: nothing
	// to free.
	Close func()
}

// Loader loads engines while the server runs: the runtime weight updates
// of an RL learner (Config.Loader). The server hands it directories under
// its load root whose files it has checked (loadPath). A load's ctx ends
// when its client goes away: a loader may stop early, and the server
// applies no load whose client has gone.
type Loader interface {
	// LoadAdapter returns the current base model with the LoRA adapter of
	// directory path attached (vLLM's /v1/load_lora_adapter); the adapter
	// shares the base model's weights.
	LoadAdapter(ctx context.Context, path string) (*Engine, error)
	// LoadWeights returns the checkpoint of directory path, which replaces
	// the base model (SGLang's /update_weights_from_disk). loadFormat is
	// the request's load_format ("" when absent). Adapters loaded later
	// attach to it.
	LoadWeights(ctx context.Context, path, loadFormat string) (*Engine, error)
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
	// loads admits one load at a time, as vLLM's and SGLang's model-update
	// locks do; a waiting client that goes away stops waiting (acquire).
	loads chan struct{}
	log   *slog.Logger
}

// acquireLoad waits for the load slot, or for ctx to end.
func (r *registry) acquireLoad(ctx context.Context) (release func(), err error) {
	select {
	case r.loads <- struct{}{}:
		return func() { <-r.loads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
