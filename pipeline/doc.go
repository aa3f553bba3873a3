// Package pipeline is evolm's data plane: Parquet shard IO over pqarrow, the
// run directory with its manifests, the stage registry, config and the stage
// runner. Stages (package stages/<name>) use only the API below.
//
// # Contract
//
// Shards. CreateShard streams record batches into one Parquet file (zstd,
// dictionary encoding, statistics, the Arrow schema stored, provenance in the
// key-value metadata). It encodes a batch's columns in parallel
// (columnWriter: pqarrow's leaf writer fed by our level builder, the same
// bytes as pqarrow.FileWriter) and compresses pages with libzstd
// (zstdCodec). It writes to a hidden temp file ".<name>.<rand>.tmp"
// in the destination directory, flocked while its writer lives;
// ShardWriter.Commit fsyncs, renames, closes and fsyncs the directory; Abort
// removes the temp file. A crash therefore
// never leaves a partial file under a shard's name. OpenShard / ReadShard
// stream batches back (GetRecordReader with ArrowReadProperties{BatchSize,
// Parallel}); with ReadOptions.Schema set they check every expected column
// exists with a compatible type and read only those. Every error names the
// file; schema mismatches are *schemas.SchemaError and show both schemas.
//
// Run directory. A run is a directory of Hive-style partitions,
//
//	runs/<run>/<table>/phase=policy/step=123/part-00000.parquet
//	runs/<run>/_manifests/<stage>.json
//	runs/<run>/_work/<stage>/            (stage scratch, see Env.WorkDir)
//
// so DuckDB (read_parquet('runs/x/rollouts/**/*.parquet',
// hive_partitioning=true)), polars and pyarrow read it as is. ShardPath,
// Phase and Step build the paths. As in Hive and Spark, a column named like
// one of the path's partitions (phase, step) is not stored in the file: the
// writer checks every row holds the partition's value and drops the column,
// and a reader whose ReadOptions.Schema asks for it gets it back from the
// path. The step is written in plain decimal (step=123, not 000123), so
// that DuckDB, polars and pyarrow infer it as an integer. A stage's manifest lists its committed
// shards (run-relative path, rows, bytes, sha256, sha256 of the last 64 KiB,
// input fingerprint); it is rewritten atomically after each commit. A shard
// is committed when it is in the manifest. Readers check what they read
// against it: model-stage and export inputs with Run.CheckShard (size, tail
// sha256, footer row count, partition), MapShards task inputs by their full
// sha256, `evolm inspect` every committed shard (--verify: full sha256,
// stray files listed, and the references between tables followed). A
// missing, swapped or edited shard, or an edited manifest, is an error
// naming the file (ErrShardMismatch). A shard whose partition columns were
// taken out of the file records their values in its metadata
// (evolm.partitions); a reader refuses a shard found under another
// partition, so a copied or moved file never changes its rows' step.
//
// Fresh. --fresh (pipeline.fresh) writes a stage's new output beside the
// old, in _fresh/<stage>, and swaps it in only once the stage has
// succeeded (see FreshDir): a failed --fresh leaves the old output as it
// was.
//
// Locks. RunStage holds an flock on _locks/<stage>.lock (holding its pid)
// for the whole run: a second process running the same stage on the run
// directory fails at once, naming the holder's pid. Its stale-temp sweep
// removes only temp files whose flock it can take, that is, of writers that
// are gone.
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
// with where it came from. Floats must be finite (NaN passes every range
// check and cannot be hashed), from any source; an empty EVOLM_* var of a
// typed key (int, float, bool, duration) is an error, not 0; a section of
// the file that no key lives under (`stagez:`) is an unknown key. A stage sees its section stages.<name> as
// Env.Config; Config.Hash identifies it in provenance and manifests.
//
// Logging and progress. Stages log with Env.Log (slog). Env.NewProgress
// reports rows/s and ETA on a terminal and as periodic log lines otherwise;
// MapShards does this for every row written.
package pipeline
