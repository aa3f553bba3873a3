package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/serving/openai"
)

// models lists the base model and the loaded adapters, with vLLM's root
// (the directory), parent (an adapter's base model) and the base model's
// max_model_len.
func (s *server) models(w http.ResponseWriter, r *http.Request) {
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	for _, e := range s.reg.list() {
		m := openai.Model{ID: e.id, Object: "model", Created: e.created, OwnedBy: "evolm", Root: e.root}
		if e.parent != "" {
			p := e.parent
			m.Parent = &p
		} else if e.eng.Tokenizer != nil {
			n := e.eng.Tokenizer.MaxModelLen()
			m.MaxModelLen = &n
		}
		list.Data = append(list.Data, m)
	}
	writeJSON(w, http.StatusOK, list)
}

// load runs one runtime load: it waits for the load slot (or for the
// client to go), loads, and applies the result unless the client has gone
// meanwhile (then the loaded engine is freed).
func (s *server) load(ctx context.Context, what string, do func(context.Context) (*Engine, error), apply func(*Engine)) error {
	release, err := s.reg.acquireLoad(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer release()
	var eng *Engine
	if failpoint.Active("serve-" + what) { // fault tests: a server that cannot load
		err = fmt.Errorf("injected fault (EVOLM_FAILPOINT serve-%s)", what)
	} else {
		eng, err = do(ctx)
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		if eng.Close != nil {
			eng.Close()
		}
		return fmt.Errorf("%s: the client went away; the load is not applied", what)
	}
	apply(eng)
	return nil
}

// loadLoRAAdapter is vLLM's POST /v1/load_lora_adapter: it loads the
// adapter at lora_path (under the load root) under lora_name and answers
// 200 with a plain-text success line; a name already loaded is a 400
// unless load_inplace, and so is one more adapter than MaxLoRAs.
func (s *server) loadLoRAAdapter(w http.ResponseWriter, r *http.Request) {
	var req openai.LoadLoRAAdapterRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	invalid := func(format string, args ...any) {
		s.fail(w, r, &apiError{status: http.StatusBadRequest, typ: "InvalidUserInput", msg: fmt.Sprintf(format, args...)})
	}
	if req.LoraName == "" || req.LoraPath == "" {
		invalid("Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	dir, err := s.loadPath("lora_path", req.LoraPath)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reg := s.reg
	reg.mu.Lock()
	_, exists := reg.adapters[req.LoraName]
	clash, full := req.LoraName == reg.base.id, !exists && len(reg.adapters) >= s.cfg.MaxLoRAs
	reg.mu.Unlock()
	switch {
	case clash || exists && !req.LoadInplace:
		invalid("The lora adapter '%s' has already been loaded.", req.LoraName)
		return
	case full:
		invalid("%d LoRA adapters are loaded, the most this server holds (--max-loras); unload one first.", s.cfg.MaxLoRAs)
		return
	}
	t0 := time.Now()
	err = s.load(r.Context(), "load-adapter", func(ctx context.Context) (*Engine, error) { return s.cfg.Loader.LoadAdapter(ctx, dir) },
		func(eng *Engine) {
			reg.mu.Lock()
			e := s.newEntry(req.LoraName, dir, reg.base.id, *eng)
			old := reg.adapters[req.LoraName]
			reg.adapters[req.LoraName] = e
			freeOld := old != nil && reg.retireLocked(old)
			reg.mu.Unlock()
			if freeOld {
				reg.free(old)
			}
		})
	if err != nil {
		invalid("Failed to load LoRA adapter '%s' from %s: %s", req.LoraName, req.LoraPath, sanitize(err))
		return
	}
	s.log.Info("serve: LoRA adapter loaded", "name", req.LoraName, "path", dir, "seconds", time.Since(t0).Seconds())
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
// loads the checkpoint at model_path (under the load root) in place of the
// base model and answers {"success", "message", "num_paused_requests"}
// (200, or 400 on failure). As SGLang does, the served model's name
// becomes model_path. Requests in flight finish on the old weights;
// adapters stay loaded on the weights they were loaded with.
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
	dir, err := s.loadPath("model_path", req.ModelPath)
	if err != nil {
		answer(http.StatusBadRequest, false, err.Error())
		return
	}
	format := ""
	if req.LoadFormat != nil {
		format = *req.LoadFormat
	}
	reg := s.reg
	t0 := time.Now()
	err = s.load(r.Context(), "update-weights", func(ctx context.Context) (*Engine, error) { return s.cfg.Loader.LoadWeights(ctx, dir, format) },
		func(eng *Engine) {
			reg.mu.Lock()
			old := reg.base
			reg.base = s.newEntry(req.ModelPath, dir, "", *eng)
			if req.WeightVersion != nil {
				reg.base.version = *req.WeightVersion
			}
			freeOld := reg.retireLocked(old)
			reg.mu.Unlock()
			if freeOld {
				reg.free(old)
			}
		})
	if err != nil {
		msg := sanitize(err)
		if errors.Is(err, context.Canceled) {
			msg = "the client went away"
		}
		s.log.Warn("serve: weight update failed", "model_path", dir, "error", msg)
		answer(http.StatusBadRequest, false, fmt.Sprintf("Failed to update weights: %s. Rolled back to the original weights.", msg))
		return
	}
	s.log.Info("serve: weights updated from disk", "model_path", dir, "seconds", time.Since(t0).Seconds())
	msg := "Succeeded to update model weights."
	if req.WeightVersion != nil {
		msg += fmt.Sprintf(" Weight version updated to %s.", *req.WeightVersion)
	}
	answer(http.StatusOK, true, msg)
}
