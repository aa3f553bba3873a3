#!/usr/bin/env bash
# gpu-check.sh — the acceptance checks of evolm's CUDA build on one GPU, in
# under 10 minutes, from a fresh clone:
#
#   TORCH_CUDA=1 make build && scripts/gpu-check.sh [--out DIR]
#   scripts/gpu-check.sh --cpu [--bin bin/evolm-cuda] [--out DIR]   # the same steps on the CPU
#
# Each check runs evolm's half (bin/evolm, or cmd/gpucheck built as bin/evolm
# was) and the reference's half (scripts/gpu_check.py: HF transformers and
# PyTorch on the same device) and prints one row of a pass/fail table:
#
#   parity fp32        logits and log-probs of 3 rows (one left-padded batch) vs
#                      transformers; max |difference| <= 1e-4 (CPU) or 1e-3 (CUDA:
#                      evolm runs SDPA kernels where transformers 4.51 on torch
#                      2.1.0 runs eager attention)
#   parity bf16        the same in bfloat16 (both sides load the fp32 checkpoint
#                      as bf16); max |difference| <= 0.05 x the largest |logit|
#   generation         greedy, and sampled with temperature 1 and top-k 1, equal
#                      to transformers' greedy search token for token (fp32, no EOS)
#   run full / LoRA    `evolm run` of the demo preset for 3 steps on the device,
#                      full fine-tuning, then LoRA rank 8: exits 0 with 3 steps
#   collectives        NCCL process group of world size 1 (all-reduce sum and
#                      broadcast of float32 tensors on the GPU, exact), and of 2
#                      ranks when 2 GPUs are visible; --cpu runs them on Gloo
#   plan vs measured   evolm plan's estimate (its total less the runtime line)
#                      against torch.cuda.max_memory_allocated (read through
#                      model/torch's shim) for one LoRA step (rank 16, 2 x 1024
#                      tokens, checkpointing) of qwen3-0.6b shapes: within 15%;
#                      --cpu: tiny shapes, VmHWM growth, reported, not checked
#   decode tokens/s    greedy decoding, 8 x 128 new tokens after 128-token
#                      prompts, qwen3-0.6b shapes, bf16: evolm / transformers
#                      generate (a ratio; > 1: evolm is faster)
#   GRPO step          one GRPO step of 8 sequences (64 + 64 tokens) on
#                      qwen3-0.6b shapes, bf16, full fine-tuning: PyTorch / evolm
#                      step time (> 1: evolm is faster); the first step's loss and
#                      grad norm must agree within 5% + 0.01 (bf16; the loss is a
#                      small sum of terms of both signs) or 0.1% (fp32)
#
# --cpu runs the same steps on the CPU with tiny shapes (make test runs it with
# bin/evolm-cuda, so that the script cannot rot); its timings say nothing of a
# GPU. Everything goes to one directory (default build/gpu-check-<time>):
# table.txt, results.jsonl (one JSON object a check), logs/<check>.log and
# the models and runs. Exit status 1 when a check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

device=cuda
out=""
bin=bin/evolm
while [ $# -gt 0 ]; do
	case $1 in
	--cpu) device=cpu ;;
	--out) out=$2; shift ;;
	--bin) bin=$2; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "gpu-check: unknown argument $1 (want --cpu, --out DIR, --bin PATH)" >&2; exit 2 ;;
	esac
	shift
done
out=${out:-build/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/logs" "$out/models"
out=$(cd "$out" && pwd)
py=${EVOLM_PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || { echo "gpu-check: $py not found: run make venv (or make build)" >&2; exit 2; }
[ -x "$bin" ] || { echo "gpu-check: $bin not found: run TORCH_CUDA=1 make build (or pass --bin)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
: > "$out/results.jsonl"
: > "$out/table.txt"
failed=0
start=$(date +%s)

# row NAME STATUS MEASURED TOLERANCE: one row of the table.
row() {
	printf '%-20s %-5s %-58s %s\n' "$1" "$2" "$3" "$4" | tee -a "$out/table.txt"
	[ "$2" = FAIL ] && failed=1
	return 0
}
printf '%-20s %-5s %-58s %s\n' check result measured tolerance | tee "$out/table.txt"

# field JSON EXPR: a value of a JSON object (Python expression over d).
field() { "$py" -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }

# step NAME CMD...: runs CMD with its output in logs/NAME.log; prints the
# last line of its stdout (a JSON result); returns its exit status.
step() {
	local name=$1
	shift
	local t0=$(date +%s)
	"$@" > "$out/logs/$name.out" 2> "$out/logs/$name.log"
	local rc=$?
	echo "[$name: exit $rc, $(($(date +%s) - t0)) s] $*" >> "$out/logs/$name.log"
	tail -n 1 "$out/logs/$name.out"
	return $rc
}

# record NAME JSON: appends the check's JSON to results.jsonl.
record() { echo "{\"check\": \"$1\", \"result\": ${2:-null}}" >> "$out/results.jsonl"; }

"$bin" version > "$out/version.txt" 2>&1
vjson=$("$bin" version --json 2>/dev/null)
build=$(field "$vjson" 'd["build"]')
ndev=$(field "$vjson" 'len(d["cuda_devices"])')
cat "$out/version.txt"
echo
if [ "$device" = cuda ]; then
	if [ "$build" != cuda ] || [ "${ndev:-0}" -lt 1 ]; then
		row "build and device" FAIL "build ${build:-?}, $ndev CUDA device(s)" "a CUDA build (TORCH_CUDA=1 make build) that sees a GPU"
		exit 1
	fi
	fp32_tol=1e-3
	grpo_tol=5e-2 grpo_atol=1e-2
	parity=small perf=qwen3-0.6b perf_dtype=bfloat16
	gen_new=32 dec=(-batch 8 -prompt 128 -new 128 -reps 3) grpo=(-prompts 2 -group 4 -prompt-len 64 -completion-len 64)
	mem=(-preset qwen3-0.6b -seq 1024 -prompt 128 -micro 2 -lora-rank 16 -dtype bfloat16)
	runsize=()
else
	fp32_tol=1e-4
	grpo_tol=1e-3 grpo_atol=1e-6
	parity=tiny perf=tiny perf_dtype=float32
	gen_new=16 dec=(-batch 4 -prompt 16 -new 16 -reps 2) grpo=(-prompts 2 -group 4 -prompt-len 16 -completion-len 16)
	mem=(-preset tiny -seq 128 -prompt 32 -micro 2 -lora-rank 16 -dtype float32)
	runsize=(--prompts-per-step 2 --samples 2 --rubric-samples 2)
fi

# cmd/gpucheck, built as the binary was (the CUDA build: -tags evolm_cuda
# and build/overlay-cuda.json), from the go build cache that built it.
export GOWORK=$root/build/go.work
if [ "$build" = cuda ]; then
	export GOFLAGS="-overlay=$root/build/overlay-cuda.json -tags=evolm_cuda"
else
	export GOFLAGS="-overlay=$root/build/overlay.json"
fi
gpucheck=$out/gpucheck
if ! step build-gpucheck go build -o "$gpucheck" ./cmd/gpucheck > /dev/null; then
	row "build gpucheck" FAIL "go build ./cmd/gpucheck failed: logs/build-gpucheck.log" ""
	exit 1
fi

# The models: random Qwen3 checkpoints (fp32 safetensors) both sides load.
for m in "parity $parity 1" "perf $perf 3" "policy tiny 1" "judge tiny 2"; do
	set -- $m
	[ -f "$out/models/$1/tokenizer.json" ] && continue
	if ! step "init-$1" "$bin" model init --arch qwen3 --preset "$2" --seed "$3" --out "$out/models/$1" > /dev/null; then
		row "model init $1" FAIL "logs/init-$1.log" ""
		exit 1
	fi
done
"$py" -c '
import json, random, sys
r = random.Random(5)
rows = [[r.randrange(151936) for _ in range(n)] for n in (32, 25, 11)]
json.dump({"rows": rows}, open(sys.argv[1], "w"))' "$out/rows.json"

# parity (fp32, bf16)
for dt in float32 bfloat16; do
	name=parity-$dt
	mkdir -p "$out/$name"
	tol=$fp32_tol rel=""
	[ $dt = bfloat16 ] && tol=0.05 rel=--relative
	if step "$name-evolm" "$gpucheck" logits -model "$out/models/parity" -device $device -dtype $dt -in "$out/rows.json" -out "$out/$name" > /dev/null &&
		res=$(step "$name" "$py" scripts/gpu_check.py logits --model "$out/models/parity" --device $device --dtype $dt \
			--in "$out/rows.json" --evolm "$out/$name" --tol $tol $rel); then
		record "$name" "$res"
		st=$([ "$(field "$res" 'd["pass"]')" = True ] && echo PASS || echo FAIL)
		row "parity ${dt/bfloat16/bf16}" $st "$(field "$res" '"max |Δ| logits %.2e, log-probs %.2e (%s)" % (d["max_logit_diff"], d["max_logprob_diff"], "'$parity'")')" \
			"<= $(field "$res" '"%.3g" % d["tol"]')$([ -n "$rel" ] && echo " (0.05 x max |logit|)")"
	else
		record "$name" null
		row "parity ${dt/bfloat16/bf16}" FAIL "see logs/$name-evolm.log, logs/$name.log" ""
	fi
done

# generation (fp32)
if step gen-evolm "$gpucheck" generate -model "$out/models/parity" -device $device -in "$out/rows.json" -new $gen_new > /dev/null &&
	res=$(step generation "$py" scripts/gpu_check.py generate --model "$out/models/parity" --device $device \
		--in "$out/rows.json" --new $gen_new --evolm "$out/logs/gen-evolm.out"); then
	record generation "$res"
	st=$([ "$(field "$res" 'd["pass"]')" = True ] && echo PASS || echo FAIL)
	row generation $st "$(field "$res" '"greedy %s, sampled (T=1, top-k 1) %s; %d rows x %d tokens" % ("equal" if d["greedy_equal"] else "DIFFERENT", "equal" if d["sampled_equal"] else "DIFFERENT", d["rows"], d["new"])')" "token for token"
else
	record generation null
	row generation FAIL "see logs/gen-evolm.log, logs/generation.log" ""
fi

# evolm run of the demo preset, 3 steps, full fine-tuning and LoRA
sed "s|runs/demo-models/|$out/models/|g" stages/presets/demo.yaml > "$out/demo.yaml"
for kind in full lora; do
	rd=$out/run-$kind
	extra=()
	[ $kind = lora ] && extra=(--lora-rank 8)
	ev=("$bin" --config "$out/demo.yaml" --run-dir "$rd" --progress off)
	if step "run-$kind-dedup" "${ev[@]}" dedup > /dev/null &&
		step "run-$kind" "${ev[@]}" --policy-device $device --judge-device $device run --steps 3 --checkpoint-every 3 "${runsize[@]}" "${extra[@]}" > /dev/null; then
		steps=$("$py" -c 'import pyarrow.dataset as ds, sys; print(ds.dataset(sys.argv[1], format="parquet").count_rows())' "$rd/steps" 2>> "$out/logs/run-$kind.log")
		ck=$(ls -d "$rd"/checkpoints/step-* 2>/dev/null | wc -l)
		st=$([ "$steps" = 3 ] && [ "$ck" -ge 1 ] && echo PASS || echo FAIL)
		record "run-$kind" "{\"steps\": ${steps:-0}, \"checkpoints\": $ck}"
		row "run $kind" $st "3-step demo on $device: $steps steps, $ck checkpoint(s)$([ $kind = lora ] && echo ', LoRA rank 8')" "exit 0, 3 steps"
	else
		record "run-$kind" null
		row "run $kind" FAIL "see logs/run-$kind.log" "exit 0, 3 steps"
	fi
done

# collectives: NCCL on the GPU(s); Gloo with --cpu
worlds="1"
[ "$device" = cpu ] && worlds="1 2"
[ "$device" = cuda ] && [ "${ndev:-0}" -ge 2 ] && worlds="1 2"
backend=$([ "$device" = cuda ] && echo NCCL || echo "Gloo (--cpu: NCCL skipped)")
for w in $worlds; do
	if res=$(step "collectives-$w" "$gpucheck" collectives -device $device -world $w); then
		record "collectives-$w" "$res"
		st=$([ "$(field "$res" 'int(d["wrong"])')" = 0 ] && echo PASS || echo FAIL)
		row "collectives world $w" $st "$backend: all-reduce sum and broadcast, $(field "$res" 'int(d["wrong"])') wrong values" "exact"
	else
		record "collectives-$w" null
		row "collectives world $w" FAIL "$backend: see logs/collectives-$w.log" "exact"
	fi
done
if [ "$device" = cuda ] && [ "${ndev:-0}" -lt 2 ]; then
	row "collectives world 2" SKIP "one GPU visible" "2 GPUs"
fi

# evolm plan against the measured peak
if res=$(step memory "$gpucheck" memory -device $device "${mem[@]}"); then
	record memory "$res"
	ratio=$(field "$res" '"%.3f" % d["ratio"]')
	if [ "$device" = cuda ]; then
		st=$("$py" -c 'import sys; print("PASS" if abs(float(sys.argv[1]) - 1) <= 0.15 else "FAIL")' "$ratio")
		tolr="within 15%"
	else
		st=INFO tolr="not checked on the CPU (tiny shapes)"
	fi
	row "plan vs measured" $st "$(field "$res" '"plan %.0f MiB, %s %.0f MiB (x%.2f), %s" % (d["plan_bytes"] / 2**20, d["measured"], d["measured_bytes"] / 2**20, d["ratio"], d["preset"])')" "$tolr"
else
	record memory null
	row "plan vs measured" FAIL "see logs/memory.log" ""
fi

# decode tokens/s: evolm / transformers
if step decode-evolm "$gpucheck" decode -model "$out/models/perf" -device $device -dtype $perf_dtype "${dec[@]}" -prompts "$out/decode-prompts.json" > /dev/null &&
	res=$(step decode "$py" scripts/gpu_check.py decode --model "$out/models/perf" --device $device --dtype $perf_dtype \
		--prompts "$out/decode-prompts.json" --new "${dec[5]}" --reps "${dec[7]}" --evolm "$out/logs/decode-evolm.out"); then
	record decode "$res"
	row "decode tokens/s" RATIO "$(field "$res" '"evolm %.1f, transformers %.1f: x%.2f (%s, %s)" % (d["evolm_tokens_per_s"], d["hf_tokens_per_s"], d["ratio"], "'$perf'", "'$perf_dtype'")')" "a ratio (> 1: evolm faster)"
else
	record decode null
	row "decode tokens/s" FAIL "see logs/decode-evolm.log, logs/decode.log" ""
fi

# one GRPO step: PyTorch / evolm
if step grpo-batch "$gpucheck" batch -model "$out/models/perf" -device $device -dtype $perf_dtype "${grpo[@]}" -out "$out/grpo-batch.json" > /dev/null &&
	step grpo-evolm "$gpucheck" grpo -model "$out/models/perf" -device $device -dtype $perf_dtype -batch "$out/grpo-batch.json" -micro 8 > /dev/null &&
	res=$(step grpo "$py" scripts/gpu_check.py grpo --model "$out/models/perf" --device $device --dtype $perf_dtype \
		--batch "$out/grpo-batch.json" --micro 8 --evolm "$out/logs/grpo-evolm.out" --tol $grpo_tol --atol $grpo_atol); then
	record grpo "$res"
	st=$([ "$(field "$res" 'd["pass"]')" = True ] && echo PASS || echo FAIL)
	row "GRPO step" $st "$(field "$res" '"evolm %.3f s, PyTorch %.3f s: x%.2f; step 1 loss %.5g/%.5g, |g| %.4g/%.4g" % (d["evolm_step_s"], d["torch_step_s"], d["ratio"], d["first_step"]["evolm_loss"], d["first_step"]["torch_loss"], d["first_step"]["evolm_grad_norm"], d["first_step"]["torch_grad_norm"])')" "step 1 within $grpo_tol rel + $grpo_atol; ratio > 1: evolm faster"
else
	record grpo null
	row "GRPO step" FAIL "see logs/grpo-*.log, logs/grpo.log" ""
fi

echo
echo "gpu-check ($device, $(($(date +%s) - start)) s): $([ $failed = 0 ] && echo all checks passed || echo SOME CHECKS FAILED); table, results and logs in $out"
exit $failed
