// Package track reports a run, as it goes, to the experiment trackers that
// researchers already watch: TensorBoard, MLflow and Weights & Biases.
// A training stage names them in its trackers key (the loop,
// stages.run.trackers; supervised fine-tuning, stages.sft.trackers), whose
// keys are declared once (Keys) and embedded in the stage's; console, the
// step's log line, stays the default. OpenStage opens a stage's trackers
// for its run directory.
//
// # Contract
//
// Every tracker receives the same metrics at the same step numbers: each
// numeric column of the steps row (Points), named train/<column>, or
// time/<part> for the time breakdown (time_judge_s → time/judge_s). The
// steps table stays the record; a tracker is a view of it. Each tracker
// also records, its own way, the run's effective configuration as
// hyperparameters (ConfigParams), the evolm version and config hash, and the
// checkpoint paths as they are written; TensorBoard also gets text samples
// (a rubric and an answer per step).
//
//   - TensorBoard (tensorboard.go): event files written natively, TFRecord
//     framing over the Event and Summary protos, encoded with protowire
//     from their published .proto field numbers (no maintained Go writer
//     exists: the ones there are wrap TensorFlow's Go bindings). Scalars
//     are simple_values, what EventAccumulator and the dashboard read.
//   - MLflow (mlflow.go): the tracking server's REST API.
//   - W&B (wandb.go): the wandb package in a Python sidecar. It is the
//     option chosen over W&B's TensorBoard sync because it is W&B's own
//     SDK, online and offline (uploaded later with `wandb sync`) alike,
//     while TensorBoard sync is gone from `wandb sync` and lives on only
//     behind a private API; wandb.go says more.
//
// # Failures never stop training
//
// Open starts every tracker before the first step, and a tracker that
// cannot start is an error there: a Python without wandb, an online W&B
// run without an API key, an MLflow URI that is not a tracking server.
// After that, Hub never blocks the loop and never fails it: each tracker
// has a bounded queue (tracker_queue events) and a goroutine
// that writes it in batches. A failed write is retried with a backoff of 1
// to 30 s, the events waiting in the queue; the tracker logs one warning
// when it starts failing, then at most one line a minute while it fails,
// and one when it recovers. A full queue drops the new events and says so
// the same way: the steps table keeps every row. At the end of the run the
// hub waits up to tracker_flush_timeout for the queues to drain, then names
// the steps a tracker did not take.
//
// # Resume
//
// A resumed run continues each tracker's run: the same TensorBoard files'
// id, MLflow run and W&B run, their ids kept in <run>/trackers/ (a stage
// other than the loop: <run>/trackers/<stage>/, and its TensorBoard files
// in <run>/tensorboard/<stage>/, so that each stage is a tracker run of its
// own). Each tracker says at Open the last step it holds (from its own
// files or server); the hub sends it nothing at or before that step, so no
// step is logged twice. The steps between the checkpoint and the crash keep
// the values the first session sent (equal to the recomputed rows but for
// their wall times); the steps the first session committed but never
// delivered are sent from the steps table (Backfill). TensorBoard's own
// SessionLog START marks each session's first step.
//
// # Ranks
//
// Under data parallelism only rank 0 opens a hub; the other ranks report
// nothing.
package track
