package dedup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Name is the stage's registered name.
const Name = "dedup"

// Config keys of stages.dedup.
const (
	KeyInput           = "input"
	KeyDataset         = "dataset"
	KeyNGram           = "ngram"
	KeyBands           = "bands"
	KeyBandRows        = "band_rows"
	KeySeed            = "seed"
	KeyVerify          = "verify"
	KeyThreshold       = "threshold"
	KeyMaxVerify       = "max_verify"
	KeyStripPunct      = "strip_punct"
	KeyStripDiacritics = "strip_diacritics"
	KeyNormNumbers     = "norm_numbers"
	KeyMessages        = "messages"
	KeyShardRows       = "shard_rows"
	KeyPartitions      = "partitions"
	KeyWorkers         = "workers"
)

// TuluDataset is the dataset column written for rows of the published mixture.
const TuluDataset = "allenai/llama-3.1-tulu-3-8b-preference-mixture"

// SampleDataset is the dataset column written for rows of the sample set.
const SampleDataset = "evolm-sample"

func init() {
	def := DefaultParams()
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "deduplicate prompts: exact (normalized content hash) and near (MinHash-LSH), streaming",
		Description: `Reads Tulu 3 preference-mixture files (Parquet or JSONL: id, prompt, chosen,
rejected, source), removes exact duplicates (same text after NFKC, case folding
and whitespace collapse) and near duplicates (MinHash-LSH over word n-gram
shingles, datatrove's defaults: 5-grams, 14 bands x 8 hashes; optionally
verified by exact Jaccard), keeps the earliest row of every cluster, and
writes the prompts table (stable prompt_id = content hash) and the
dedup_report table. Memory does not grow with the input: signatures and
hashes spill to disk-backed buckets under the run's _work/dedup.`,
		Inputs:  []string{"external"},
		Outputs: []string{schemas.Prompts.Name, schemas.DedupReport.Name},
		// Memory and speed knobs: the output is the same for any value.
		Volatile: []string{KeyPartitions, KeyWorkers},
		Fields: []pipeline.Field{
			{Key: KeyInput, Type: pipeline.TypeStrings, Default: []string{}, Required: true,
				Description: "input files or directories (Tulu 3 layout, .parquet or .jsonl), read in order",
				Example:     []string{datasets.SamplePath}},
			{Key: KeyDataset, Type: pipeline.TypeString, Default: "",
				Description: "dataset column of the output; empty: " + SampleDataset + " for sample rows, else " + TuluDataset},
			{Key: KeyNGram, Type: pipeline.TypeInt, Default: def.Shingle.NGram,
				Description: "words per shingle (datatrove: 5); prompts with fewer words are only exact-deduplicated"},
			{Key: KeyBands, Type: pipeline.TypeInt, Default: def.Bands, Description: "LSH bands (datatrove: 14)"},
			{Key: KeyBandRows, Type: pipeline.TypeInt, Default: def.BandRows, Description: "MinHash values per band (datatrove: 8)"},
			{Key: KeySeed, Type: pipeline.TypeInt, Default: int(def.Seed), Description: "seed of the MinHash permutations"},
			{Key: KeyVerify, Type: pipeline.TypeBool, Default: def.Verify,
				Description: "check LSH candidate pairs by exact shingle Jaccard (removes false positives)"},
			{Key: KeyThreshold, Type: pipeline.TypeFloat, Default: def.Threshold,
				Description: "minimum Jaccard of a verified pair, in [0, 1]", Example: 0.8},
			{Key: KeyMaxVerify, Type: pipeline.TypeInt, Default: def.MaxVerify,
				Description: "earlier members of an LSH bucket a row is verified against"},
			{Key: KeyStripPunct, Type: pipeline.TypeBool, Default: def.Shingle.StripPunct,
				Description: "punctuation and symbols separate words and are dropped before shingling (as datatrove)"},
			{Key: KeyStripDiacritics, Type: pipeline.TypeBool, Default: def.Shingle.StripDiacritics,
				Description: "remove combining marks before shingling (as datatrove)"},
			{Key: KeyNormNumbers, Type: pipeline.TypeBool, Default: def.Shingle.NormNumbers,
				Description: "replace numbers by 0 before shingling (datatrove does; off because prompts differing in numbers differ)"},
			{Key: KeyMessages, Type: pipeline.TypeBool, Default: true,
				Description: "read chosen to fill the messages column (the prompt conversation); off: messages is the prompt alone"},
			{Key: KeyShardRows, Type: pipeline.TypeInt, Default: 100_000,
				Description: "input rows per output prompts shard (the unit of commit and resume)"},
			{Key: KeyPartitions, Type: pipeline.TypeInt, Default: def.Partitions,
				Description: "spill partitions per bucket table (pass 2 loads one at a time: about 170 bytes x rows / partitions); 0: auto, about 16 MB each"},
			{Key: KeyWorkers, Type: pipeline.TypeInt, Default: 0,
				Description: "signature workers; 0: GOMAXPROCS"},
		},
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) { return newDedupFromConfig(cfg) },
	})
}

// Stage is the dedup stage. Its contract:
//
//   - input: the files of stages.dedup.input, in order (Tulu 3 layout);
//   - output: prompts/part-NNNNN.parquet, one shard per shard_rows input rows
//     of each file, holding that range's kept rows in input order; and
//     dedup_report/part-00000.parquet, one row per cluster;
//   - a bad input (corrupt, missing column, wrong type, null id/prompt/source,
//     invalid UTF-8, no rows) fails in pass 1, before anything is committed.
type Stage struct {
	Inputs    []string
	Dataset   string
	Params    Params
	Messages  bool
	ShardRows int64
}

func newDedupFromConfig(cfg *pipeline.Config) (*Stage, error) {
	p := DefaultParams()
	p.Shingle = ShingleOptions{
		NGram:           cfg.Int(KeyNGram),
		StripPunct:      cfg.Bool(KeyStripPunct),
		StripDiacritics: cfg.Bool(KeyStripDiacritics),
		NormNumbers:     cfg.Bool(KeyNormNumbers),
	}
	p.Bands, p.BandRows = cfg.Int(KeyBands), cfg.Int(KeyBandRows)
	p.Verify, p.Threshold, p.MaxVerify = cfg.Bool(KeyVerify), cfg.Float(KeyThreshold), cfg.Int(KeyMaxVerify)
	p.Partitions, p.Workers = cfg.Int(KeyPartitions), cfg.Int(KeyWorkers)
	if cfg.Int(KeySeed) < 0 {
		return nil, cfg.Errorf(KeySeed, "%d, want ≥ 0", cfg.Int(KeySeed))
	}
	p.Seed = uint64(cfg.Int(KeySeed))
	if err := p.Validate(); err != nil {
		key, _, _ := strings.Cut(err.Error(), ":")
		return nil, cfg.Errorf(key, "%s", strings.TrimSpace(strings.TrimPrefix(err.Error(), key+":")))
	}
	s := &Stage{
		Inputs:    cfg.Strings(KeyInput),
		Dataset:   cfg.String(KeyDataset),
		Params:    p,
		Messages:  cfg.Bool(KeyMessages),
		ShardRows: int64(cfg.Int(KeyShardRows)),
	}
	if s.ShardRows < 1 {
		return nil, cfg.Errorf(KeyShardRows, "%d, want ≥ 1", s.ShardRows)
	}
	if len(s.Inputs) == 0 {
		return nil, cfg.Unsetf(KeyInput, "no input files given")
	}
	return s, nil
}

// Run runs passes 1 and 2 (Analyze), then writes the prompts shards and the
// report through env.MapShards, which commits each shard atomically and skips
// shards committed by an earlier, interrupted run with the same inputs.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	files, err := datasets.ResolveInputs(s.Inputs)
	if err != nil {
		return err
	}
	work, err := env.WorkDir()
	if err != nil {
		return err
	}
	var total int64
	for _, f := range files {
		n, err := datasets.CountParquetRows(f)
		if err != nil {
			total = 0 // JSONL (or a bad file, which pass 1 reports): unknown
			break
		}
		total += n
	}
	prog := env.NewProgress("dedup: hash and sign", total)
	p := s.Params
	p.Progress = prog.Add
	p.FullRows = s.Messages
	// The runner holds this stage's lock on the run, so spill directories
	// left in work are a dead run's. Ours has a name of its own all the same:
	// spill files are never shared between processes.
	if err := removeStaleSpills(work); err != nil {
		return err
	}
	spill, err := os.MkdirTemp(work, fmt.Sprintf("spill-%d-", os.Getpid()))
	if err != nil {
		return fmt.Errorf("dedup work dir: %w", err)
	}
	defer os.RemoveAll(spill)
	res, err := Analyze(ctx, files, spill, p)
	prog.Done()
	if err != nil {
		return err
	}

	var tasks []pipeline.Task
	var first uint32
	for fi, file := range files {
		rows := res.FileRows[fi]
		for start := int64(0); start < rows; start += s.ShardRows {
			n := min(s.ShardRows, rows-start)
			base := first + uint32(start)
			tasks = append(tasks, pipeline.Task{
				Output: pipeline.ShardPath(schemas.Prompts.Name, len(tasks)),
				Schema: schemas.Prompts.Schema(),
				Inputs: files,
				Rows:   n - res.RemovedIn(base, base+uint32(n)),
				Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
					return s.writePrompts(ctx, env, res, file, start, n, base, w)
				},
			})
		}
		first += uint32(rows)
	}
	tasks = append(tasks, pipeline.Task{
		Output: pipeline.ShardPath(schemas.DedupReport.Name, 0),
		Schema: schemas.DedupReport.Schema(),
		Inputs: files,
		Rows:   res.Clusters,
		Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
			return writeReport(env, res, w)
		},
	})
	if err := env.MapShards(ctx, tasks); err != nil {
		return err
	}
	fmt.Fprint(env.Stderr, res.Summary())
	env.Log.Info("dedup summary", "rows_in", res.RowsIn, "exact_dups", res.ExactDups, "near_dups", res.NearDups,
		"clusters", res.Clusters, "rows_out", res.RowsOut, "candidate_pairs", res.CandidatePairs, "rejected_pairs", res.RejectedPairs)
	return nil
}

// removeStaleSpills removes the spill directories of earlier, dead runs in
// the stage's work directory.
func removeStaleSpills(work string) error {
	ents, err := os.ReadDir(work)
	if err != nil {
		return fmt.Errorf("dedup work dir: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() && (e.Name() == "spill" || strings.HasPrefix(e.Name(), "spill-")) {
			if err := os.RemoveAll(filepath.Join(work, e.Name())); err != nil {
				return fmt.Errorf("dedup work dir: stale spill: %w", err)
			}
		}
	}
	return nil
}

// Summary is the printed summary of a dedup.
func (s Stats) Summary() string {
	return fmt.Sprintf("dedup: rows in %d, exact dups %d, near dups %d, clusters %d, rows out %d (candidate pairs %d, rejected by Jaccard %d)\n",
		s.RowsIn, s.ExactDups, s.NearDups, s.Clusters, s.RowsOut, s.CandidatePairs, s.RejectedPairs)
}

// writePrompts streams rows [start, start+n) of file (global rows from base)
// and writes the kept ones.
func (s *Stage) writePrompts(ctx context.Context, env *pipeline.Env, res *Result, file string, start, n int64, base uint32, w *pipeline.ShardWriter) error {
	r, err := datasets.OpenRange(file, datasets.Options{PromptsOnly: !s.Messages}, start, n)
	if err != nil {
		return err
	}
	defer r.Close()
	b := schemas.Prompts.NewBuilder(env.Mem)
	defer b.Release()
	flushAt := int(min(max(env.BatchSize, 1), 8192))
	flush := func() error { return b.Flush(w) }
	buf := make([]datasets.TuluRow, 512)
	row := base
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, err := r.Read(buf)
		for i := range k {
			if !res.Removed(row) {
				p := s.promptRow(&buf[i])
				b.Append(&p)
				if b.Len() >= flushAt {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			buf[i] = datasets.TuluRow{}
			row++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if got := int64(row - base); got != n {
		return fmt.Errorf("input %s: rows %d..%d: read %d rows, pass 1 saw %d (file changed?)", file, start, start+n, got, n)
	}
	return flush()
}

func (s *Stage) promptRow(t *datasets.TuluRow) schemas.Prompt {
	ds := s.Dataset
	if ds == "" {
		ds = TuluDataset
		if strings.HasPrefix(t.Source, datasets.SampleSourcePrefix) {
			ds = SampleDataset
		}
	}
	return schemas.Prompt{
		PromptID: PromptID(t.Prompt),
		Dataset:  ds,
		Source:   t.Source,
		SourceID: t.ID,
		Category: datasets.CategoryOf(t.Source),
		Prompt:   t.Prompt,
		Messages: promptMessages(t),
	}
}

// promptMessages is the conversation up to the prompt: chosen without its
// trailing assistant turns, or the prompt alone as a user turn.
func promptMessages(t *datasets.TuluRow) []schemas.Message {
	msgs := t.Chosen
	for len(msgs) > 0 && msgs[len(msgs)-1].Role == "assistant" {
		msgs = msgs[:len(msgs)-1]
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		return []schemas.Message{{Role: "user", Content: t.Prompt}}
	}
	out := make([]schemas.Message, len(msgs))
	for i, m := range msgs {
		out[i] = schemas.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// writeReport writes one dedup_report row per cluster, in keeper order.
func writeReport(env *pipeline.Env, res *Result, w *pipeline.ShardWriter) error {
	b := schemas.DedupReport.NewBuilder(env.Mem)
	defer b.Release()
	flush := func() error { return b.Flush(w) }
	for _, c := range res.ClusterList() {
		keptID, ok := res.ids[c.Keeper]
		if !ok {
			return errors.New("dedup report: keeper without a prompt id")
		}
		row := schemas.DedupCluster{ClusterID: c.ID, KeptID: keptID.String(), Method: "exact", Similarity: 1}
		minSim := math.Inf(1)
		for _, m := range c.Removed {
			row.RemovedIDs = append(row.RemovedIDs, res.ids[m.Row].String())
			if !m.Exact {
				row.Method = "minhash"
			}
			minSim = min(minSim, float64(m.Similarity))
		}
		if len(c.Removed) > 0 {
			row.Similarity = minSim
		}
		b.Append(&row)
		if b.Len() >= 8192 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
