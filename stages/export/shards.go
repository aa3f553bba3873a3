package export

import "github.com/evolm/evolm/pipeline"

// Shard is pipeline.TableShard.
//
// Deprecated: use pipeline.TableShard. Kept while stages/analyze still
// names it.
type Shard = pipeline.TableShard

// ErrMissingTable is pipeline.ErrMissingTable.
//
// Deprecated: use pipeline.ErrMissingTable.
var ErrMissingTable = pipeline.ErrMissingTable

// TableShards is run.TableShards(table).
//
// Deprecated: use pipeline.Run.TableShards. Kept while stages/analyze still
// calls it.
func TableShards(run *pipeline.Run, table string) ([]Shard, error) { return run.TableShards(table) }
