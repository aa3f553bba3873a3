package main

// Stage packages register themselves with the pipeline in init(); importing
// them here is what makes `evolm <stage>` exist. Add one line per stage.
import (
	_ "github.com/evolm/evolm/stages/analyze"
	_ "github.com/evolm/evolm/stages/dedup"
	_ "github.com/evolm/evolm/stages/eval"
	_ "github.com/evolm/evolm/stages/export"
	_ "github.com/evolm/evolm/stages/judge"
	_ "github.com/evolm/evolm/stages/replay"
	_ "github.com/evolm/evolm/stages/rollout"
	_ "github.com/evolm/evolm/stages/rubrics"
	_ "github.com/evolm/evolm/stages/run"
	_ "github.com/evolm/evolm/stages/sft"
)
