// Package pipeline is evolm's data plane: Parquet shard IO over pqarrow, the
// run directory with its manifests, the stage registry, config and the stage
// runner. Stages (package stages/<name>) use only the API below.
//
// # Contract
//
// Shards. CreateShard streams record batches into one Parquet file (zstd,
// dictionary encoding, statistics, the Arrow schema stored, provenance in the
// key-value metadata). It writes to a hidden temp file ".<name>.<rand>.tmp"
// in the destination directory; ShardWriter.Commit closes, fsyncs, renames
// and fsyncs the directory; Abort removes the temp file. A crash therefore
// never leaves a partial file under a shard's name. OpenShard / ReadShard
// stream batches back (GetRecordReader with ArrowReadProperties{BatchSize,
// Parallel}); with ReadOptions.Schema set they check every expected column
// exists with a compatible type and read only those. Every error names the
// file; schema mismatches are *SchemaError and show both schemas.
//
// Run directory. A run is a directory of Hive-style partitions,
//
//	runs/<run>/<table>/phase=policy/step=000123/part-00000.parquet
//	runs/<run>/_manifests/<stage>.json
//	runs/<run>/_work/<stage>/            (stage scratch, see Env.WorkDir)
//
// so DuckDB (read_parquet('runs/x/rollouts/**/*.parquet',
// hive_partitioning=true)), polars and pyarrow read it as is. ShardPath,
// Phase and Step build the paths. As in Hive and Spark, a column named like
// one of the path's partitions (phase, step) is not stored in the file: the
// writer checks every row holds the partition's value and drops the column,
// and a reader whose ReadOptions.Schema asks for it gets it back from the
// path. (DuckDB reads the zero-padded step as VARCHAR unless given
// hive_types={'step': BIGINT}.) A stage's manifest lists its committed
// shards (run-relative path, rows, bytes, sha256, input fingerprint); it is
// rewritten atomically after each commit. A shard is committed when it is in
// the manifest.
//
// Stages. A stage package registers a Spec in init() with Register: name,
// docs, input and output tables, config Fields (key, type, default, enum,
// description, example) and New, the constructor from config that checks
// every field (newXFromConfig; tests call it through StageConfig). The CLI
// generates `evolm <stage>` with its flags and --help from the spec. A Stage
// has one method, Run(ctx, *Env): the runner (RunStage) calls New, opens the
// run directory, removes stale temp files under the stage's output tables,
// refuses to mix shards made under another config hash (the section's
// hash less the spec's Volatile keys; pipeline.fresh redoes them instead),
// then calls Run once.
//
// Inside Run, a stage describes its output as Tasks (one output shard each:
// path, schema, input files, a Write func) and hands them to Env.MapShards,
// which runs them with errgroup and at most pipeline.parallelism at a time,
// skips shards already committed from the same inputs (resume), commits each
// finished shard and reports progress. A stage that needs a global pass
// (dedup) streams its inputs first, spills to Env.WorkDir if it must, and
// then writes its outputs through MapShards as well. Stages allocate Arrow
// memory from Env.Mem and release every object they create.
//
// Config. LoadConfig merges, later winning: the embedded defaults.yaml and
// the specs' defaults, a --config YAML file, EVOLM_* env vars (key with dots
// as underscores, upper case: EVOLM_STAGES_DEDUP_THRESHOLD) and flags. An
// unknown key in the file, or an EVOLM_STAGES_* var naming no key, is an
// error naming the key; so is a value of the wrong type or outside its enum,
// with where it came from. A stage sees its section stages.<name> as
// Env.Config; Config.Hash identifies it in provenance and manifests.
//
// Logging and progress. Stages log with Env.Log (slog). Env.NewProgress
// reports rows/s and ETA on a terminal and as periodic log lines otherwise;
// MapShards does this for every row written.
package pipeline
