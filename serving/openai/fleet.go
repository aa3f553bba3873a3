package openai

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// FleetConfig configures a Fleet.
type FleetConfig struct {
	Endpoints      []string // base URLs of the servers (…/v1)
	MaxInFlight    int
	MaxAttempts    int
	RequestTimeout time.Duration
	APIKey         string // default $EVOLM_API_KEY
	Mode           roles.FleetMode
	// Dir holds the versions' weights; every server must be able to read
	// it at the same path (the same machine, or a shared file system).
	Dir string
	// Run and Role name the versions: "<run>-<role>-step-NNNNNN".
	Run, Role string
	// Encode tokenizes text with the learner's tokenizer and EndID is its
	// end-of-turn token (-1: none), for servers that return no token ids.
	Encode func(string) []int
	EndID  int
	Log    *slog.Logger
}

// FleetStats count what the fleet did.
type FleetStats struct {
	Syncs        int           // versions made current
	SyncTime     time.Duration // total time of Sync: writing the weights and loading them
	ServerIDs    int64         // completions whose token ids the server returned
	Retokenized  int64         // completions whose token ids were re-tokenized here
	Mismatches   int64         // of ServerIDs, completions whose re-tokenized text differs
	LastSyncTime time.Duration
}

// Fleet generates for a trained role on a fleet of OpenAI-compatible
// inference servers (vLLM, SGLang, `evolm serve`) while the learner trains
// in process, and keeps the fleet's weights in step with the learner's:
// `evolm run` with stages.run.generation_backend: openai.
//
// # Versions
//
// The weights that generate step s are version (run, s): Sync(s) makes
// them current before the step's first generation. A version is written
// to Config.Dir/<role>/step-NNNNNN (atomically: a temporary directory,
// renamed) and loaded on every endpoint:
//
//   - roles.FleetLoRA: the trainer saves its adapter in PEFT's format and each
//     server loads it with vLLM's POST /v1/load_lora_adapter under the
//     version's name, "<run>-<role>-step-NNNNNN"; requests name the adapter
//     as their model, and the previous version's adapter is unloaded
//     (/v1/unload_lora_adapter) once the new one is in place.
//   - roles.FleetFull: the trainer saves an HF checkpoint and each server loads it
//     with SGLang's POST /update_weights_from_disk {model_path, weight_version}.
//     SGLang then serves it under model_path, so requests name the directory
//     and the version label is checked in each answer's
//     metadata.weight_version.
//
// Every answer must come from the current version (Config.CheckModel):
// the answer's model is the adapter's name (vLLM, `evolm serve`) or the
// directory, and its weight_version the label where the server reports one.
// A server that failed to load a version, or answers from other weights, is
// out of rotation for that version and its requests are retried on the
// others; when no server loaded it, Sync fails and the step with it, before
// anything of the step is written (`evolm run --resume` redoes it). Each
// rollout row records its version in its model column.
//
// # Token ids
//
// The learner trains on token ids. The fleet asks for them (vLLM's
// return_tokens_as_token_ids, which `evolm serve` implements) and uses them
// as returned (token_ids_source "server"); when a server returns none it
// tokenizes the text with the learner's tokenizer, adding the end-of-turn
// token to a completion that stopped (source "retokenized"). Where both exist
// it compares them and counts the rows whose re-tokenization differs
// (FleetStats.Mismatches, logged per call): a non-zero count says that training on
// re-tokenized text would differ from what was sampled.
//
// The sampler's log-probs are recorded with each row (token_logprobs), for
// truncated importance sampling in the learner (stages.run.tis_cap).
//
// A Fleet is a Generator on the servers, for the current version.
type Fleet struct {
	cfg FleetConfig
	log *slog.Logger

	mu      sync.RWMutex
	client  *Client  // the current version's
	version string   // its label
	model   string   // the model name requests give
	dir     string   // its weights' directory
	holders []string // endpoints that loaded it

	serverIDs, retok, mismatch atomic.Int64
	syncs                      int
	syncTime, lastSync         time.Duration
}

// NewFleet checks cfg. No version is current until Sync.
func NewFleet(cfg FleetConfig) (*Fleet, error) {
	switch {
	case len(cfg.Endpoints) == 0:
		return nil, errors.New("fleet: no endpoints")
	case cfg.Mode != roles.FleetLoRA && cfg.Mode != roles.FleetFull:
		return nil, fmt.Errorf("fleet: mode %q, want %q or %q", cfg.Mode, roles.FleetLoRA, roles.FleetFull)
	case cfg.Dir == "" || cfg.Run == "" || cfg.Role == "":
		return nil, errors.New("fleet: Dir, Run and Role are required")
	case cfg.Encode == nil:
		return nil, errors.New("fleet: Encode is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	// Check the endpoints once, through the client's own normalisation.
	probe, err := New(Config{Endpoints: cfg.Endpoints, Model: "probe"})
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	cfg.Endpoints = probe.Endpoints()
	return &Fleet{cfg: cfg, log: cfg.Log}, nil
}

// VersionName is the label of step's weights in run for role.
func VersionName(run, role string, step int) string {
	return fmt.Sprintf("%s-%s-step-%06d", run, role, step)
}

// VersionDir is the directory of step's weights under dir.
func VersionDir(dir, role string, step int) string {
	return filepath.Join(dir, role, fmt.Sprintf("step-%06d", step))
}

// Model returns the model name that the current version's answers carry
// (what rows record); "" before the first Sync.
func (f *Fleet) Model() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.model
}

// Sync makes step's weights current: save writes them to the directory it
// is given (the trainer's Save), and every endpoint loads them. Endpoints
// that fail are out of rotation until a later version loads on them; Sync
// fails when none loaded it, naming each endpoint's error.
func (f *Fleet) Sync(ctx context.Context, step int, save func(dir string) error) error {
	t0 := time.Now()
	version := VersionName(f.cfg.Run, f.cfg.Role, step)
	dir, err := filepath.Abs(VersionDir(f.cfg.Dir, f.cfg.Role, step))
	if err != nil {
		return err
	}
	if err := writeDir(dir, save); err != nil {
		return fmt.Errorf("fleet: write version %s: %w", version, err)
	}
	admin, err := New(Config{Endpoints: f.cfg.Endpoints, Model: version, RequestTimeout: f.cfg.RequestTimeout,
		APIKey: f.cfg.APIKey, Logger: f.log})
	if err != nil {
		return err
	}
	defer admin.Close()
	errs := make([]error, len(f.cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range f.cfg.Endpoints {
		wg.Go(func() {
			if f.cfg.Mode == roles.FleetLoRA {
				errs[i] = admin.LoadLoRAAdapter(ctx, ep, version, dir)
			} else {
				errs[i] = admin.UpdateWeightsFromDisk(ctx, ep, dir, version)
			}
		})
	}
	wg.Wait()
	var holders []string
	var failed []string
	for i, ep := range f.cfg.Endpoints {
		if errs[i] == nil {
			holders = append(holders, ep)
			continue
		}
		failed = append(failed, errs[i].Error())
		f.log.Warn("fleet: an endpoint failed to load the new weights; it is out of rotation for this version",
			"endpoint", ep, "version", version, "error", errs[i].Error())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(holders) == 0 {
		return fmt.Errorf("fleet: no endpoint loaded version %s (%s, weights in %s): %s", version, f.cfg.Mode, dir, strings.Join(failed, "; "))
	}
	model := version
	if f.cfg.Mode == roles.FleetFull {
		model = dir // SGLang serves the new weights under model_path
	}
	label := ""
	if f.cfg.Mode == roles.FleetFull {
		label = version
	}
	client, err := New(Config{Endpoints: holders, Model: model, MaxInFlight: f.cfg.MaxInFlight,
		MaxAttempts: f.cfg.MaxAttempts, RequestTimeout: f.cfg.RequestTimeout, APIKey: f.cfg.APIKey, Logger: f.log,
		CheckModel: true, WeightVersion: label, TokenIDs: true})
	if err != nil {
		return err
	}
	f.mu.Lock()
	prevClient, prevModel, prevDir, prevHolders := f.client, f.model, f.dir, f.holders
	f.client, f.version, f.model, f.dir, f.holders = client, version, model, dir, holders
	f.mu.Unlock()
	if prevClient != nil {
		prevClient.Close()
	}
	if f.cfg.Mode == roles.FleetLoRA && prevModel != "" && prevModel != model {
		for _, ep := range prevHolders {
			if err := admin.UnloadLoRAAdapter(ctx, ep, prevModel); err != nil {
				f.log.Warn("fleet: could not unload the previous adapter", "endpoint", ep, "adapter", prevModel, "error", err.Error())
			}
		}
	}
	if prevDir != "" && prevDir != dir {
		// The servers have read it (full weights are in their memory; an
		// adapter that is unloaded is not read again).
		if err := os.RemoveAll(prevDir); err != nil {
			f.log.Warn("fleet: could not remove the previous version's weights", "dir", prevDir, "error", err.Error())
		}
	}
	d := time.Since(t0)
	f.mu.Lock()
	f.syncs++
	f.syncTime += d
	f.lastSync = d
	f.mu.Unlock()
	f.log.Info("fleet: weights synced", "version", version, "mode", string(f.cfg.Mode), "endpoints", len(holders),
		"of", len(f.cfg.Endpoints), "seconds", d.Seconds())
	return nil
}

// writeDir runs save into a temporary sibling of dir and renames it to
// dir, replacing an earlier one: the servers never read a partial version.
func writeDir(dir string, save func(string) error) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := save(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// Generate implements backend.Generator on the current version.
func (f *Fleet) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	f.mu.RLock()
	client, version := f.client, f.version
	f.mu.RUnlock()
	if client == nil {
		return nil, errors.New("fleet: no weights synced yet")
	}
	out, err := client.Generate(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("fleet (version %s): %w", version, err)
	}
	var server, retok, mismatch int64
	for i := range out {
		for j := range out[i].Completions {
			c := &out[i].Completions[j]
			ids := f.retokenize(c)
			switch {
			case c.TokenIDs != nil:
				c.TokenSource = backend.TokensServer
				server++
				if !slices.Equal(ids, c.TokenIDs) {
					mismatch++
				}
			default:
				c.TokenIDs, c.TokenSource = ids, backend.TokensRetokenized
				retok++
			}
			if c.Tokens < 0 {
				c.Tokens = len(c.TokenIDs)
			}
		}
	}
	f.serverIDs.Add(server)
	f.retok.Add(retok)
	f.mismatch.Add(mismatch)
	if mismatch > 0 {
		f.log.Info("fleet: re-tokenized text differs from the server's token ids (training uses the server's)",
			"version", version, "completions", mismatch, "of", server)
	}
	return out, nil
}

// retokenize is a completion's text in the learner's tokens, with the
// end-of-turn token after a completion that stopped on its own.
func (f *Fleet) retokenize(c *backend.Completion) []int {
	ids := f.cfg.Encode(c.Text)
	if c.FinishReason == backend.FinishStop && f.cfg.EndID >= 0 {
		ids = append(ids, f.cfg.EndID)
	}
	return ids
}

// Stats returns the fleet's counts so far.
func (f *Fleet) Stats() FleetStats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return FleetStats{Syncs: f.syncs, SyncTime: f.syncTime, LastSyncTime: f.lastSync, ServerIDs: f.serverIDs.Load(),
		Retokenized: f.retok.Load(), Mismatches: f.mismatch.Load()}
}

// Close unloads nothing (the servers outlive the run) and releases the
// client's connections.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.client != nil {
		f.client.Close()
	}
}

var _ backend.Generator = (*Fleet)(nil)

// FleetRunName is the run part of the version names of the run in directory
// dir: its base name and a hash of its absolute path, so that two runs that
// share a fleet never share a name.
func FleetRunName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	h := fnv.New32a()
	h.Write([]byte(abs))
	base := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, filepath.Base(abs))
	return fmt.Sprintf("%s-%06x", base, h.Sum32()&0xffffff)
}

// SyncTime is the wall time Sync has spent so far: writing the weights and
// loading them on the servers.
func (f *Fleet) SyncTime() time.Duration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.syncTime
}
