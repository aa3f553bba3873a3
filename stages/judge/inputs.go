package judge

import (
	"context"
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// promptFiles finds the prompts that hold the rollouts' questions: the
// configured files; else the prompts files the rollout stage recorded in the
// rollouts' metadata (lmstage.MetaPromptsFiles); else what the dedup stage
// committed in this run.
func (s *Stage) promptFiles(env *pipeline.Env, respFiles []string) ([]string, error) {
	if len(s.prompt) > 0 {
		return lmstage.Inputs(env, s.prompt, "dedup", schemas.Prompts.Name)
	}
	recorded, err := lmstage.PromptsFilesOf(respFiles)
	if err != nil {
		return nil, err
	}
	if len(recorded) > 0 {
		return recorded, nil
	}
	files, err := lmstage.Inputs(env, nil, "dedup", schemas.Prompts.Name)
	if err != nil {
		return nil, fmt.Errorf("the questions of the rollouts: their metadata names no prompts file that still exists, and %w; pass the prompts Parquet the rollouts answered with --prompts", err)
	}
	return files, nil
}

// read turns a batch of the responses input into Responses.
func (s *Stage) read(rec arrow.RecordBatch, questions map[string]string) ([]Response, error) {
	if s.source == SourcePairs {
		ps, err := schemas.Pairs.Read(rec)
		if err != nil {
			return nil, err
		}
		out := make([]Response, 0, 2*len(ps))
		for _, p := range ps {
			out = append(out, PairResponses(&p)...)
		}
		return out, nil
	}
	rs, err := schemas.Rollouts.Read(rec)
	if err != nil {
		return nil, err
	}
	out := make([]Response, 0, len(rs))
	for _, r := range rs {
		if r.Role != s.role {
			continue
		}
		q, ok := questions[r.PromptID]
		out = append(out, Response{ID: r.RolloutID, ItemID: r.PromptID, Question: q, HasQuestion: ok, Text: r.Text, Failed: r.Error})
	}
	return out, nil
}

// loadRubrics reads every rubric, grouped by item and ordered by sample.
func loadRubrics(ctx context.Context, env *pipeline.Env, files []string) (map[string][]schemas.Rubric, error) {
	out := map[string][]schemas.Rubric{}
	seen := map[string]string{}
	err := pipeline.ReadEach(ctx, env, schemas.Rubrics, files, func(f string, rs []schemas.Rubric) error {
		for _, r := range rs {
			if prev, dup := seen[r.RubricID]; dup {
				return fmt.Errorf("rubric %s appears in %s and %s", r.RubricID, prev, f)
			}
			seen[r.RubricID] = f
			out[r.ItemID] = append(out[r.ItemID], r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, rs := range out {
		sort.Slice(rs, func(a, b int) bool {
			if rs[a].SampleIdx != rs[b].SampleIdx {
				return rs[a].SampleIdx < rs[b].SampleIdx
			}
			return rs[a].RubricID < rs[b].RubricID
		})
	}
	return out, nil
}

// loadQuestions streams the prompts and keeps the text of those that have
// rubrics.
func loadQuestions(ctx context.Context, env *pipeline.Env, files []string, byItem map[string][]schemas.Rubric) (map[string]string, error) {
	out := map[string]string{}
	err := pipeline.ReadEach(ctx, env, schemas.Prompts, files, func(_ string, ps []schemas.Prompt) error {
		for _, p := range ps {
			if _, ok := byItem[p.PromptID]; ok {
				out[p.PromptID] = p.Prompt
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
