#!/usr/bin/env bash
# bench/dp: the step time of `evolm run` as 1 process versus 2 data-parallel
# ranks (`--nproc 2`, Gloo on CPU) at ZeRO 0 and 1, side by side, and the
# all-reduce bandwidth of model/dist against torch.distributed on the same
# Gloo backend (bench/dist). It prints each layout's final-weight difference
# from the one-process run and says when it exceeds 1e-6: then the layouts
# did not do the same work and their ratio does not count. A benchmark, not a test. Each rank runs one
# libtorch thread; on a 2-core machine 2 ranks have a core each while 1
# process uses one, so the comparison is of equal threads per rank.
#
#   bench/dp/run.sh [--preset tiny|small] [--steps N]
#
# Run from the repository root with the Makefile's environment (GOWORK,
# GOFLAGS), as scripts/bench.sh does.
set -euo pipefail
source "$(dirname "$0")/../loop-setup.sh" bench/dp "$@"
cat >"$work/dp.yaml" <<YAML
stages:
  run:
    input: [$prompts]
    steps: $steps
    k: 2
    prompts_per_step: 8
    samples: 4
    rubric_samples: 2
    checkpoint_every: 1000
    temporal_min_age: 1
    temporal_max_age: 2
    lr: 1.0e-3
    micro_batch: 4
    seed: 5
roles:
  policy:
    model: $work/models/policy
    max_tokens: 32
    threads: 1
    max_batch: 8
    disable_thinking: true
  rubric_generator:
    max_tokens: 32
  judge:
    model: $work/models/judge
    mode: yesno
    threads: 1
    max_batch: 8
pipeline:
  progress: "off"
log:
  level: warn
YAML
for run in "1 0" "2 0" "2 1"; do
	set -- $run
	"$bin" run --config "$work/dp.yaml" --run-dir "$work/n$1-z$2" --nproc "$1" --zero-stage "$2" >"$work/n$1-z$2.log" 2>&1 ||
		{ echo "bench/dp: --nproc $1 --zero-stage $2 failed:"; tail -20 "$work/n$1-z$2.log"; exit 1; }
done
"$py" - "$work" "$preset" "$steps" <<'PY'
import glob, statistics, sys
import pyarrow.parquet as pq
work, preset, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def times(name):
    t = pq.read_table(glob.glob(f"{work}/{name}/steps/**/*.parquet", recursive=True)).to_pydict()
    return [e for _, e in sorted(zip(t["step"], t["elapsed_s"]))]
print(f"bench/dp: preset {preset}, {steps} steps, 8 prompts x 4 samples x 32 tokens, 1 libtorch thread per rank, Gloo")
base = statistics.median(times("n1-z0"))
def weights(name):
    from safetensors.torch import load_file
    ck = sorted(glob.glob(f"{work}/{name}/checkpoints/step-*"))[-1]
    out = {}
    for f in glob.glob(f"{ck}/policy/*.safetensors"):
        out.update(load_file(f))
    return out
ref = weights("n1-z0")
print(f"{'layout':<18} {'s/step (median)':>16} {'vs 1 process':>13} {'final weights max |Δ|':>22}")
worst = 0.0
for name, label in (("n1-z0", "1 process"), ("n2-z0", "2 ranks, ZeRO 0"), ("n2-z1", "2 ranks, ZeRO 1")):
    m = statistics.median(times(name))
    w = weights(name)
    assert w.keys() == ref.keys(), f"{name}: other tensors than the 1-process run"
    d = max(float((w[k].float() - ref[k].float()).abs().max()) for k in ref)
    worst = max(worst, d)
    print(f"{label:<18} {m:>16.2f} {base/m:>12.2f}x {d:>22.1e}")
if worst > 1e-6:
    print(f"NOTE: the final weights differ from one process's by up to {worst:.1e} (> 1e-6): the runs did not do "
          "the same work, so the ratios above are not a like-for-like comparison")
PY
echo
go run ./bench/dist -sizes 1,16,64 -ranks 2 -runs 3
