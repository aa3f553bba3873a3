package pairs

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/evolm/evolm/internal/choice"
	"github.com/evolm/evolm/internal/thinking"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// Config configures pair construction.
type Config struct {
	// Weights maps each strategy (schemas.Strategies) to its mixing weight;
	// missing strategies have weight 0. Default 1:1:1.
	Weights map[string]float64
	// Window is the temporal strategy's age window (20–100).
	Window Window
	// Age says how ages are counted (AgePolicySteps, the official clock).
	Age AgeClock
	// PolicyIndex maps a policy-phase step to its number among policy steps
	// (0, 1, …), for AgePolicySteps; nil counts every step.
	PolicyIndex func(step int64) int64
	// Fallback is what an empty window does (FallbackOfficial).
	Fallback Fallback
	// WidenStep widens an empty window on both sides under FallbackWiden (10).
	WidenStep int64
	// Policy samples a+ and a− (temperature 1.0, top-p 0.95).
	Policy backend.Sampling
	// Infer samples the back-translated question (temperature 0.3, top-p 0.95).
	Infer backend.Sampling
	// InferCheckpoint is the checkpoint id recorded in the rows of inferred
	// questions ("" is Checkpoint): "initial" when a frozen copy of the
	// initial model infers them (Builder.Inferrer).
	InferCheckpoint string
	// Rubric samples the rubric of the rubric-guided strategy; the official
	// code uses the training generation config (temperature 1.0, top-p 0.95).
	Rubric backend.Sampling
	// RubricFormat reads the rubric-guided strategy's rubric for prompts
	// that list its criteria (strict when empty; lenient is the official
	// reading).
	RubricFormat schemas.RubricFormat
	// Seed is the base of every draw and sampling seed.
	Seed int64
	// Model and Checkpoint identify the generator in the rollout rows when
	// the backend reports no model id.
	Model, Checkpoint string
}

// AgeClock says how a buffered answer's age is counted.
type AgeClock string

const (
	// AgePolicySteps is the official clock: the newest buffered answer's
	// policy step minus the entry's, counting policy steps only, so that an
	// answer's age does not grow during a rubric phase.
	AgePolicySteps AgeClock = "policy_steps"
	// AgeGlobalSteps is evolm's earlier clock: this step minus the entry's,
	// rubric steps included.
	AgeGlobalSteps AgeClock = "global_steps"
	// AgeNewestGlobal is the official code's clock: the newest buffered
	// answer's step minus the entry's, in global steps (rubric steps
	// counted), so that ages do not grow during a rubric phase but a rubric
	// phase between two answers counts.
	AgeNewestGlobal AgeClock = "newest_global"
)

// AgeClocks lists the age clocks.
var AgeClocks = []AgeClock{AgePolicySteps, AgeGlobalSteps, AgeNewestGlobal}

// ParseAgeClock validates a config value.
func ParseAgeClock(s string) (AgeClock, error) {
	return choice.Parse("temporal age clock", s, AgeClocks...)
}

// DefaultConfig returns the official settings with maxTokens new tokens per
// generation.
func DefaultConfig(maxTokens int) Config {
	return Config{
		Weights:   map[string]float64{schemas.StrategyTemporal: 1, schemas.StrategyBacktranslate: 1, schemas.StrategyRubricGuided: 1},
		Window:    Window{MinAge: 20, MaxAge: 100},
		Age:       AgePolicySteps,
		Fallback:  FallbackOfficial,
		WidenStep: 10,
		Policy:    backend.Sampling{MaxTokens: maxTokens, Temperature: 1.0, TopP: 0.95},
		Infer:     backend.Sampling{MaxTokens: maxTokens, Temperature: 0.3, TopP: 0.95},
		Rubric:    backend.Sampling{MaxTokens: maxTokens, Temperature: 1.0, TopP: 0.95},
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	total := 0.0
	for k, w := range c.Weights {
		known := false
		for _, s := range schemas.Strategies {
			known = known || s == k
		}
		if !known {
			return fmt.Errorf("pairs: unknown strategy %q (known: %v)", k, schemas.Strategies)
		}
		if w < 0 {
			return fmt.Errorf("pairs: strategy %s has weight %v < 0", k, w)
		}
		total += w
	}
	if total <= 0 {
		return fmt.Errorf("pairs: strategy weights sum to %v, want > 0", total)
	}
	if c.Window.MinAge < 0 || c.Window.MaxAge < c.Window.MinAge {
		return fmt.Errorf("pairs: temporal window [%d, %d] invalid, want 0 ≤ min ≤ max", c.Window.MinAge, c.Window.MaxAge)
	}
	if _, err := ParseAgeClock(string(c.Age)); err != nil {
		return fmt.Errorf("pairs: %w", err)
	}
	if _, err := ParseFallback(string(c.Fallback)); err != nil {
		return fmt.Errorf("pairs: %w", err)
	}
	return nil
}

// ageAt returns how old a buffered answer is at step, in c.Age's clock.
func (c Config) ageAt(step int64, buf *Buffer) func(schemas.ReplayEntry) int64 {
	if c.Age == AgeGlobalSteps {
		return func(e schemas.ReplayEntry) int64 { return step - e.Step }
	}
	idx := c.PolicyIndex
	if idx == nil || c.Age == AgeNewestGlobal {
		idx = func(s int64) int64 { return s }
	}
	// The official code measures from the newest policy step the buffer has
	// seen, which every policy step adds to.
	now := int64(math.MinInt64)
	for _, e := range buf.Entries() {
		if e.Step < step {
			now = max(now, idx(e.Step))
		}
	}
	return func(e schemas.ReplayEntry) int64 { return now - idx(e.Step) }
}

// Item is one question of the step's batch.
type Item struct {
	PromptID string
	Question string
}

// Builder builds the pairs of one rubric-phase step.
type Builder struct {
	Policy    backend.Generator // answers (and infers questions when Inferrer is nil)
	RubricGen backend.Generator // writes the rubric of the rubric-guided strategy (the policy model when shared)
	// Inferrer infers the back-translated questions: a frozen copy of the
	// initial model (the official default); nil: Policy, the model being
	// trained.
	Inferrer backend.Generator
	Prompts  *prompts.Set
	Buffer   *Buffer
	Cfg      Config
	Log      *slog.Logger
}

// Result is what one step built.
type Result struct {
	Pairs    []schemas.Pair
	Rollouts []schemas.Rollout // every generation the pairs used
	// Fallbacks counts items whose drawn strategy could not run (temporal
	// with an empty buffer) and used another.
	Fallbacks int
}

// Assign draws each item's strategy from the weights with a seeded RNG.
// Temporal is replaced by a draw among the other strategies when the buffer
// has no entry older than step. Items first … first+n−1 of the step get the
// draws a single call for all of them would give.
func (b *Builder) Assign(step int64, first, n int) (strategies []string, fallbacks int) {
	names := append([]string(nil), schemas.Strategies...)
	sort.Strings(names)
	rng := rand.New(rand.NewPCG(uint64(b.Cfg.Seed), uint64(step)))
	draw := func(exclude string) string {
		total := 0.0
		for _, s := range names {
			if s != exclude {
				total += b.Cfg.Weights[s]
			}
		}
		x := rng.Float64() * total
		for _, s := range names {
			if s == exclude {
				continue
			}
			if x -= b.Cfg.Weights[s]; x < 0 {
				return s
			}
		}
		for i := len(names) - 1; i >= 0; i-- { // rounding: last positive weight
			if names[i] != exclude && b.Cfg.Weights[names[i]] > 0 {
				return names[i]
			}
		}
		return names[0]
	}
	hasOld := false
	for _, e := range b.Buffer.Entries() {
		hasOld = hasOld || e.Step < step
	}
	strategies = make([]string, first+n)
	for i := range strategies {
		s := draw("")
		if s == schemas.StrategyTemporal && !hasOld {
			others := 0.0
			for _, o := range names {
				if o != schemas.StrategyTemporal {
					others += b.Cfg.Weights[o]
				}
			}
			if others > 0 {
				s = draw(schemas.StrategyTemporal)
				if i >= first {
					fallbacks++
				}
			}
		}
		strategies[i] = s
	}
	return strategies[first:], fallbacks
}

// gen is one pending generation with the rollout row it will fill.
type gen struct {
	req  backend.GenerateRequest
	role string
	out  *schemas.Rollout
}

// Build builds one pair per item at step.
func (b *Builder) Build(ctx context.Context, step int64, items []Item) (Result, error) {
	return b.BuildFrom(ctx, step, 0, items)
}

// BuildFrom builds the pairs of items first, first+1, … of step: their ids,
// strategies and seeds continue those of items 0 … first−1, so that a step
// can build more pairs (active sampling) without repeating any.
func (b *Builder) BuildFrom(ctx context.Context, step int64, first int, items []Item) (Result, error) {
	if err := b.Cfg.Validate(); err != nil {
		return Result{}, err
	}
	if first < 0 {
		return Result{}, fmt.Errorf("pairs step %d: first item %d, want ≥ 0", step, first)
	}
	strategies, fallbacks := b.Assign(step, first, len(items))
	if fallbacks > 0 && b.Log != nil {
		b.Log.Warn("temporal strategy has no buffered answer yet; used another strategy", "step", step, "items", fallbacks)
	}
	system, err := b.Prompts.Policy()
	if err != nil {
		return Result{}, err
	}
	s := &build{b: b, step: step, first: first, items: items, strategies: strategies, system: system,
		rng:   rand.New(rand.NewPCG(uint64(b.Cfg.Seed)^0x9e3779b97f4a7c15^(uint64(first)*0xbf58476d1ce4e5b9), uint64(step))),
		pairs: make([]schemas.Pair, len(items)), plus: make([]*gen, len(items)), rubric: make([]*gen, len(items)),
		infer: make([]*gen, len(items)), minus: make([]*gen, len(items)), guided: make([][2]*gen, len(items))}
	for _, round := range []func(context.Context) error{s.round1, s.round2, s.round3} {
		if err := round(ctx); err != nil {
			return Result{}, err
		}
	}
	return s.result(fallbacks), nil
}

// answerText is the answer as judged: the completion with thinking removed.
func answerText(g *gen) string { return thinking.Strip(g.out.Text) }

// run sends gs to g and fills their rollout rows. A row that failed
// permanently fails the step: a pair cannot be half built.
func (b *Builder) run(ctx context.Context, g backend.Generator, gs []*gen) error {
	if len(gs) == 0 {
		return nil
	}
	reqs := make([]backend.GenerateRequest, len(gs))
	for i, x := range gs {
		reqs[i] = x.req
	}
	resps, err := g.Generate(ctx, reqs)
	if err != nil {
		return fmt.Errorf("pairs: generate: %w", err)
	}
	for i, r := range resps {
		if r.Failure != nil {
			return fmt.Errorf("pairs: generation %s failed: %v", r.ID, r.Failure)
		}
		if len(r.Completions) != 1 {
			return fmt.Errorf("pairs: generation %s returned %d completions, want 1", r.ID, len(r.Completions))
		}
		c := r.Completions[0]
		o := gs[i].out
		o.Text, o.FinishReason = c.Text, string(c.FinishReason)
		o.PromptTokens, o.CompletionTokens = int32(r.PromptTokens), int32(c.Tokens)
		if r.Model != "" { // the generator that answered: policy or rubric generator
			o.Model = r.Model
		}
		for _, lp := range c.LogProbs {
			o.TokenLogprobs = append(o.TokenLogprobs, float32(lp.LogProb))
		}
		o.SetTokenIDs(c.TokenIDs, c.TokenSource)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// Enum lists the age clocks (a config key's allowed values).
func (AgeClock) Enum() []string {
	out := make([]string, len(AgeClocks))
	for i, c := range AgeClocks {
		out[i] = string(c)
	}
	return out
}
