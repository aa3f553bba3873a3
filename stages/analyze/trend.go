package analyze

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// TrendName is the trend stage's registered name.
const TrendName = "analyze-trend"

// Tables of the trend stage.
var (
	TrendRubricsTable = schemas.TrendRubrics.Name // one rubric per (checkpoint, prompt)
	TrendTable        = schemas.RubricTrend.Name  // one row per checkpoint
)

// Config keys of stages.analyze-trend.
const (
	KeyCheckpoints = "checkpoints"
	KeyPrompts     = "prompts"
	KeyLimit       = "limit"
	KeyOrder       = "order"
	KeySeed        = lmstage.KeySeed
	KeyTemperature = "eval_temperature"
	KeyTopP        = "eval_top_p"
)

// Prompt orders (key order).
const (
	OrderSeeded = "seeded" // by a hash of the seed and the prompt id
	OrderFile   = "file"   // as the input files list them
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    TrendName,
		Summary: "rubric-evolution trend: rubrics for a fixed prompt set from each checkpoint, official statistics per checkpoint",
		Description: `For each checkpoint (a policy / rubric generator checkpoint directory, e.g.
runs/x/checkpoints/step-000050/policy, or a served model name for the openai
backend) the rubric generator of roles.rubric_generator, with that model, writes
one rubric for each of a fixed set of prompts: the first limit prompts of the
input (a prompts table in Parquet, or JSONL with "question"), in a seeded order
or the files' order, sampled at eval_temperature 0.6 and eval_top_p 0.95 as the official
qualitative_eval.py does (max_tokens: roles.rubric_generator.max_tokens).
Writes trend_rubrics (one shard per checkpoint; a rerun skips committed ones)
and rubric_trend (per checkpoint: label-only %, specific %, constraint %,
criteria per rubric, by the official definitions), printed to stdout.`,
		Inputs:  []string{schemas.Prompts.Name},
		Outputs: []string{TrendRubricsTable, TrendTable},
		Fields: []pipeline.Field{
			{Key: KeyCheckpoints, Type: pipeline.TypeStrings, Default: []string{}, Required: true,
				Description: "checkpoints in trend order: HF checkpoint directories (torch) or served model names (openai)",
				Example:     []string{"runs/paper/checkpoints/step-000025/policy", "runs/paper/checkpoints/step-000050/policy"}},
			{Key: KeyPrompts, Type: pipeline.TypeStrings, Default: []string{},
				Description: "prompt files or globs: prompts-table Parquet, or JSONL lines with \"question\" (and \"id\"); empty: the run's prompts table"},
			{Key: KeyLimit, Type: pipeline.TypeInt, Default: 100, Min: pipeline.Bound(1), Description: "prompts in the fixed set (the first N in the order)"},
			{Key: KeyOrder, Type: pipeline.TypeString, Default: OrderSeeded, Enum: []string{OrderSeeded, OrderFile},
				Description: "seeded: ordered by a hash of seed and prompt id (stable under resharding); file: the input's order"},
			{Key: KeySeed, Type: pipeline.TypeInt, Default: 0, Description: "seed of the prompt order and of sampling (the same per prompt at every checkpoint)"},
			{Key: KeyTemperature, Type: pipeline.TypeFloat, Default: 0.6, Min: pipeline.Bound(0), Description: "sampling temperature (official qualitative_eval.py: 0.6)"},
			{Key: KeyTopP, Type: pipeline.TypeFloat, Default: 0.95, Min: pipeline.Bound(0), ExclusiveMin: true, Max: pipeline.Bound(1),
				Description: "nucleus mass (official qualitative_eval.py: 0.95)"},
		},
		Uses: roles.Uses(roles.RubricGenerator),
		New:  func(cfg *pipeline.Config) (pipeline.Stage, error) { return newTrendFromConfig(cfg) },
	})
}

// Trend is the analyze-trend stage.
type Trend struct {
	Checkpoints []string
	Prompts     []string
	Limit       int
	Order       string
	Seed        int64
	Temperature float64
	TopP        float64
	Stdout      io.Writer // the table's destination; os.Stdout
	cfg         *pipeline.Config
}

func newTrendFromConfig(cfg *pipeline.Config) (*Trend, error) {
	t := &Trend{Checkpoints: cfg.Strings(KeyCheckpoints), Prompts: cfg.Strings(KeyPrompts), Limit: cfg.Int(KeyLimit),
		Order: cfg.String(KeyOrder), Seed: int64(cfg.Int(KeySeed)), Temperature: cfg.Float(KeyTemperature),
		TopP: cfg.Float(KeyTopP), Stdout: os.Stdout, cfg: cfg}
	if len(t.Checkpoints) == 0 {
		return nil, cfg.Unsetf(KeyCheckpoints, "no checkpoints given")
	}
	for i, c := range t.Checkpoints {
		if c == "" {
			return nil, cfg.Errorf(KeyCheckpoints, "entry %d is empty", i)
		}
	}
	if _, err := t.role(); err != nil {
		return nil, err
	}
	return t, nil
}

// role reads roles.rubric_generator; its model is the checkpoints', so an
// unset model is no error.
func (t *Trend) role() (roles.Config, error) {
	rc, err := roles.Read(t.cfg, roles.RubricGenerator)
	if err != nil && !(errors.Is(err, pipeline.ErrUnset) && rc.Model == "") {
		return rc, err
	}
	return rc, nil
}

// TrendPrompt is one prompt of the fixed set.
type TrendPrompt struct {
	Index    int // position in the set
	ID       string
	Question string
}

// LoadTrendPrompts reads the prompt files (prompts-table Parquet, or JSONL
// with "question" and optionally "id" or "prompt_id"), orders them and
// keeps the first limit.
func LoadTrendPrompts(ctx context.Context, mem memory.Allocator, files []string, order string, seed int64, limit int) ([]TrendPrompt, error) {
	var ps []TrendPrompt
	for _, f := range files {
		var err error
		if strings.HasSuffix(f, ".jsonl") || strings.HasSuffix(f, ".json") {
			ps, err = readPromptsJSONL(f, ps)
		} else {
			ps, err = readPromptsParquet(ctx, mem, f, ps)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("no prompts in %s", strings.Join(files, ", "))
	}
	if order == OrderSeeded {
		keys := make(map[string]int64, len(ps))
		for _, p := range ps {
			keys[p.ID] = rules.DeriveSeed(seed, "trend-order", p.ID)
		}
		slices.SortStableFunc(ps, func(a, b TrendPrompt) int {
			return cmp.Or(cmp.Compare(keys[a.ID], keys[b.ID]), cmp.Compare(a.ID, b.ID))
		})
	}
	ps = ps[:min(limit, len(ps))]
	for i := range ps {
		ps[i].Index = i
	}
	return ps, nil
}

func readPromptsJSONL(path string, ps []TrendPrompt) ([]TrendPrompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var row struct {
			ID       any    `json:"id"`
			PromptID string `json:"prompt_id"`
			Question string `json:"question"`
			Prompt   string `json:"prompt"`
		}
		if err := json.Unmarshal([]byte(b), &row); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		q := cmp.Or(row.Question, row.Prompt)
		if q == "" {
			return nil, fmt.Errorf("%s:%d: no \"question\"", path, line)
		}
		id := row.PromptID
		if id == "" && row.ID != nil {
			id = fmt.Sprint(row.ID)
		}
		if id == "" {
			id = fmt.Sprintf("%s:%d", filepath.Base(path), line)
		}
		ps = append(ps, TrendPrompt{ID: id, Question: q})
	}
	return ps, sc.Err()
}

func readPromptsParquet(ctx context.Context, mem memory.Allocator, path string, ps []TrendPrompt) ([]TrendPrompt, error) {
	var rows []schemas.Prompt
	for rec, err := range pipeline.ReadShard(ctx, path, pipeline.ReadOptions{Mem: mem, Schema: schemas.Prompts.Schema()}) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rows = append(rows[:0], make([]schemas.Prompt, rec.NumRows())...)
		if err := schemas.Prompts.ReadInto(rec, rows); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, p := range rows {
			ps = append(ps, TrendPrompt{ID: p.PromptID, Question: p.Prompt})
		}
	}
	return ps, nil
}

var stepRE = regexp.MustCompile(`(?i)(?:^|[/_\-.=])step[-_=]?(\d+)`)

// CheckpointStep is the training step in a checkpoint path (…/step-000050/…,
// step_50, step=50: the last such component), or -1.
func CheckpointStep(path string) int64 {
	m := stepRE.FindAllStringSubmatch(filepath.ToSlash(path), -1)
	if len(m) == 0 {
		return -1
	}
	n, err := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// TrendRubricsSchema is the schema of trend_rubrics (schemas.TrendRubrics):
// one row per (checkpoint, prompt), partitioned by ckpt_index.
var TrendRubricsSchema = schemas.TrendRubrics.Schema()

// TrendSchema is the schema of rubric_trend (schemas.RubricTrend): one row
// per checkpoint; step is -1 when the path names none.
var TrendSchema = schemas.RubricTrend.Schema()

// TrendRow is one checkpoint's official statistics.
type TrendRow struct {
	Index      int64
	Checkpoint string
	Step       int64
	OfficialSummary
	Failed    int64 // rubrics whose generation failed on the backend
	Truncated int64 // rubrics cut at max_tokens (finish_reason "length")
}

// Row is r as a rubric_trend row.
func (r *TrendRow) Row() schemas.RubricTrendRow {
	return schemas.RubricTrendRow{CkptIndex: r.Index, Checkpoint: r.Checkpoint, Step: r.Step,
		OfficialSummary: schemas.OfficialSummary(r.OfficialSummary), Failed: r.Failed, Truncated: r.Truncated}
}

// Run generates the rubrics of each checkpoint (one shard each, one model
// open at a time), then tabulates them.
func (t *Trend) Run(ctx context.Context, env *pipeline.Env) error {
	rc, err := t.role()
	if err != nil {
		return err
	}
	set, err := roles.Prompts(rc)
	if err != nil {
		return err
	}
	files, err := lmstage.Inputs(env, t.Prompts, "dedup", schemas.Prompts.Name)
	if err != nil {
		return err
	}
	ps, err := LoadTrendPrompts(ctx, env.Mem, files, t.Order, t.Seed, t.Limit)
	if err != nil {
		return err
	}
	items := make([]lmstage.Item, len(ps))
	for i, p := range ps {
		msgs, err := set.RubricForQuestion(p.Question)
		if err != nil {
			return fmt.Errorf("prompt %s: %w", p.ID, err)
		}
		items[i] = lmstage.Item{ID: p.ID, Messages: msgs}
	}
	env.Log.Info("trend", "checkpoints", len(t.Checkpoints), "prompts", len(ps), "temperature", t.Temperature, "top_p", t.TopP,
		"max_tokens", rc.Sampling.MaxTokens)
	var shards []string
	for k, ckpt := range t.Checkpoints {
		out := pipeline.ShardPath(TrendRubricsTable, 0, pipeline.Partition{Key: "ckpt_index", Value: fmt.Sprintf("%03d", k)})
		shards = append(shards, env.Out.Path(out))
		// One task at a time: each opens a model.
		err := env.MapShards(ctx, []pipeline.Task{{Output: out, Schema: TrendRubricsSchema, Inputs: files, Rows: int64(len(items)),
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				return t.generate(ctx, env, w, rc, k, ckpt, ps, items)
			}}})
		if err != nil {
			return fmt.Errorf("checkpoint %d (%s): %w", k, ckpt, err)
		}
	}
	rows, err := ReadTrend(ctx, env.Mem, shards)
	if err != nil {
		return err
	}
	if err := WriteTrendTable(t.Stdout, rows); err != nil {
		return err
	}
	return env.MapShards(ctx, []pipeline.Task{{Output: pipeline.ShardPath(TrendTable, 0), Schema: TrendSchema, Inputs: shards,
		Rows:  int64(len(rows)),
		Write: pipeline.WriteBatch(func() arrow.RecordBatch { return BuildTrend(env.Mem, rows) })}})
}

// generate opens checkpoint k and writes its rubrics for the prompt set.
func (t *Trend) generate(ctx context.Context, env *pipeline.Env, w *pipeline.ShardWriter, rc roles.Config, k int, ckpt string,
	ps []TrendPrompt, items []lmstage.Item) error {
	rc.Model = ckpt
	b, err := roles.Open(rc, env.Log)
	if err != nil {
		return err
	}
	defer b.Close()
	spec := lmstage.SampleSpec{Role: schemas.RoleRubricGenerator, Phase: schemas.PhasePolicy, N: 1, Sampling: rc.Sampling,
		BaseSeed: t.Seed, Checkpoint: ckpt}
	spec.Sampling.Temperature, spec.Sampling.TopP = t.Temperature, t.TopP
	rolls, err := lmstage.Sample(ctx, b, max(rc.BatchRows, 1), spec, items)
	if err != nil {
		return err
	}
	lmstage.RecordFailures(&env.Failures, rolls)
	step := CheckpointStep(ckpt)
	rows := make([]schemas.TrendRubric, len(rolls))
	for i := range rolls {
		r, p := &rolls[i], ps[i]
		st := OfficialRubricStats(r.Text)
		rows[i] = schemas.TrendRubric{CkptIndex: int64(k), Checkpoint: ckpt, Step: step, PromptIndex: int64(p.Index),
			PromptID: p.ID, Question: p.Question, RawText: r.Text, FinishReason: r.FinishReason,
			CompletionTokens: int64(r.CompletionTokens), Error: r.Error, CriteriaCount: int64(st.Criteria),
			AvgCriterionLen: st.AvgCriterionLen, LabelOnlyPct: st.LabelOnlyPct, SpecificPct: st.SpecificPct, ConstraintPct: st.ConstraintPct}
	}
	rec := schemas.TrendRubrics.Build(env.Mem, rows)
	defer rec.Release()
	return w.Write(rec)
}

// ReadTrend reads trend_rubrics shards (one per checkpoint) and returns the
// official statistics per checkpoint, from each rubric's raw text.
func ReadTrend(ctx context.Context, mem memory.Allocator, shards []string) ([]TrendRow, error) {
	type acc struct {
		row TrendRow
		avg PromptAverager
	}
	byIndex := map[int64]*acc{}
	var rows []schemas.TrendRubric
	for _, path := range shards {
		for rec, err := range pipeline.ReadShard(ctx, path, pipeline.ReadOptions{Mem: mem, Schema: TrendRubricsSchema}) {
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			rows = append(rows[:0], make([]schemas.TrendRubric, rec.NumRows())...)
			if err := schemas.TrendRubrics.ReadInto(rec, rows); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			for i := range rows {
				r := &rows[i]
				a := byIndex[r.CkptIndex]
				if a == nil {
					a = &acc{row: TrendRow{Index: r.CkptIndex, Checkpoint: r.Checkpoint, Step: r.Step}}
					byIndex[r.CkptIndex] = a
				}
				a.avg.Add(r.PromptID, OfficialRubricStats(r.RawText))
				if r.Error != nil {
					a.row.Failed++
				}
				if r.FinishReason == string(backend.FinishLength) {
					a.row.Truncated++
				}
			}
		}
	}
	out := make([]TrendRow, 0, len(byIndex))
	for _, a := range byIndex {
		a.row.OfficialSummary = a.avg.Summary()
		out = append(out, a.row)
	}
	slices.SortFunc(out, func(x, y TrendRow) int { return cmp.Compare(x.Index, y.Index) })
	return out, nil
}

// BuildTrend turns rows into one record batch (the caller releases it).
func BuildTrend(mem memory.Allocator, rows []TrendRow) arrow.RecordBatch {
	out := make([]schemas.RubricTrendRow, len(rows))
	for i := range rows {
		out[i] = rows[i].Row()
	}
	return schemas.RubricTrend.Build(mem, out)
}

// WriteTrendTable prints the trend: one line per checkpoint.
func WriteTrendTable(w io.Writer, rows []TrendRow) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "checkpoint\tstep\t"+officialHeader+"truncated\tfailed\t")
	for i := range rows {
		r := &rows[i]
		step := "-"
		if r.Step >= 0 {
			step = strconv.FormatInt(r.Step, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%d\t%d\t\n", r.Checkpoint, step, officialCells(&r.OfficialSummary), r.Truncated, r.Failed)
	}
	return tw.Flush()
}
