#!/usr/bin/env bash
# bench/fleet: one `evolm run` step in process versus on a fleet of two local
# `evolm serve` processes (stages.run.generation_backend openai), with LoRA
# sync (vLLM's runtime LoRA API) and full-weight sync (SGLang's
# update_weights_from_disk), printed side by side with the weight-sync time
# per step. A benchmark, not a test: on a 2-core CPU machine the servers and
# the learner share the cores, so the fleet cannot be faster here; on a GPU
# node each server has its own GPU.
#
#   bench/fleet/run.sh [--preset tiny|small] [--steps N]
#
# Run from the repository root with the Makefile's environment (GOWORK,
# GOFLAGS), as scripts/bench.sh does.
set -euo pipefail
pids=()
cleanup_extra() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
source "$(dirname "$0")/../loop-setup.sh" bench/fleet "$@"

config() { # config NAME EXTRA-RUN-LINES
	cat >"$work/$1.yaml" <<YAML
stages:
  run:
    input: [$prompts]
    steps: $steps
    k: 2
    prompts_per_step: 4
    samples: 4
    rubric_samples: 2
    checkpoint_every: 1000
    temporal_min_age: 1
    temporal_max_age: 2
    lr: 1.0e-3
    seed: 5
$2roles:
  policy:
    model: $work/models/policy
    max_tokens: 32
    threads: 1
    disable_thinking: true
  rubric_generator:
    max_tokens: 32
  judge:
    model: $work/models/judge
    mode: yesno
    threads: 1
pipeline:
  progress: "off"
log:
  level: info
YAML
	echo "$work/$1.yaml"
}

serve() { # serve LOG → prints the URL once listening
	"$bin" serve --model "$work/models/policy" --addr 127.0.0.1:0 --threads 1 --disable-thinking --enable-lora \
		--enable-weight-updates --load-root "$work" >"$1" 2>&1 &
	pids+=($!)
	for _ in $(seq 600); do
		url=$(grep -o 'addr=http://[0-9.:]*/v1' "$1" | head -1 | cut -d= -f2) || true
		[ -n "${url:-}" ] && { echo "$url"; return; }
		sleep 0.2
	done
	echo "bench/fleet: evolm serve did not start: $(cat "$1")" >&2
	exit 1
}

a=$(serve "$work/serve-a.log")
b=$(serve "$work/serve-b.log")
fleet="    generation_backend: openai
    generation_endpoints: [$a, $b]
"
lora="    lora_rank: 8
    lora_alpha: 16
"
for name in inproc-lora fleet-lora inproc-full fleet-full; do
	extra=""
	case $name in
	*-lora) extra=$lora ;;
	esac
	case $name in
	fleet-*) extra="$extra$fleet" ;;
	esac
	"$bin" run --config "$(config "$name" "$extra")" --run-dir "$work/$name" >"$work/$name.log" 2>&1 ||
		{ echo "bench/fleet: $name failed:"; tail -20 "$work/$name.log"; exit 1; }
done

"$py" - "$work" "$preset" "$steps" <<'PY'
import glob, re, statistics, sys
import pyarrow.parquet as pq
work, preset, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def step_times(name):
    t = pq.read_table(glob.glob(f"{work}/{name}/steps/**/*.parquet", recursive=True)).to_pydict()
    return [e for _, e in sorted(zip(t["step"], t["elapsed_s"]))]
def sync_times(name):
    log = open(f"{work}/{name}.log").read()
    return [float(s) for s in re.findall(r'msg="fleet: weights synced".* seconds=([0-9.e+-]+)', log)]
print(f"bench/fleet: preset {preset}, {steps} steps (K=2), 4 prompts x 4 samples, 32 tokens; 2 local evolm serve processes")
print(f"{'sync':<6} {'in process s/step':>18} {'fleet s/step':>13} {'fleet/in process':>17} {'sync s/step':>12}")
for mode in ("lora", "full"):
    ip, fl, sy = step_times(f"inproc-{mode}"), step_times(f"fleet-{mode}"), sync_times(f"fleet-{mode}")
    # Step 0 includes loading the judge and compiling nothing; report the median.
    mi, mf, ms = statistics.median(ip), statistics.median(fl), statistics.median(sy) if sy else float("nan")
    print(f"{mode:<6} {mi:>18.2f} {mf:>13.2f} {mf/mi:>17.2f} {ms:>12.3f}")
print("(medians over the steps; fleet s/step includes the sync; measured on this machine, all processes on its cores)")
PY
