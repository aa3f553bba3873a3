#!/usr/bin/env bash
# bench/dp: the step time of `evolm run` as 1 process versus 2 data-parallel
# ranks (`--nproc 2`, Gloo on CPU) at ZeRO 0 and 1, side by side, and the
# all-reduce bandwidth of model/dist against torch.distributed on the same
# Gloo backend (bench/dist). A benchmark, not a test. Each rank runs one
# libtorch thread; on a 2-core machine 2 ranks have a core each while 1
# process uses one, so the comparison is of equal threads per rank.
#
#   bench/dp/run.sh [--preset tiny|small] [--steps N]
#
# Run from the repository root with the Makefile's environment (GOWORK,
# GOFLAGS), as scripts/bench.sh does.
set -euo pipefail
preset=tiny
steps=4
while [ $# -gt 0 ]; do
	case $1 in
	--preset) preset=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	*) echo "bench/dp: unknown argument $1" >&2; exit 2 ;;
	esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${EVOLM_PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d /tmp/evolm-bench-dp.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$root"
go build -o "$work/evolm" ./cmd/evolm
bin=$work/evolm
"$bin" model init --arch qwen3 --preset "$preset" --seed 1 --out "$work/models/policy" >/dev/null
"$bin" model init --arch qwen3 --preset tiny --seed 2 --out "$work/models/judge" >/dev/null
"$bin" dedup --run-dir "$work/dedup" --input datasets/sample/tulu3_sample.parquet --progress off --log-level warn >/dev/null
prompts=$(find "$work/dedup/prompts" -name '*.parquet' | sort | paste -sd, -)
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
print(f"{'layout':<18} {'s/step (median)':>16} {'vs 1 process':>13}")
for name, label in (("n1-z0", "1 process"), ("n2-z0", "2 ranks, ZeRO 0"), ("n2-z1", "2 ranks, ZeRO 1")):
    m = statistics.median(times(name))
    print(f"{label:<18} {m:>16.2f} {base/m:>12.2f}x")
PY
echo
go run ./bench/dist -sizes 1,16,64 -ranks 2 -runs 3
