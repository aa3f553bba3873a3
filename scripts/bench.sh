#!/usr/bin/env bash
# `make bench`: every benchmark, one after the other, each under a header with
# the time and the load average. The side-by-side ones repeat BENCH_RUNS times
# (default 3) and print each ratio as min / median / max over the runs with
# the load average before and after; the Go benchmarks run -count BENCH_RUNS.
#
#   scripts/bench.sh                 # all of them (long: tens of minutes on 2 cores)
#   BENCH_ONLY="judge engine" scripts/bench.sh
#
# Names: go judge engine grpo tokenizer dedup parquet dist dp fleet, and, only
# when asked for, judge-1.7b (the judge at the paper's judge size: a random
# Qwen3-1.7B checkpoint, 6.9 GB written under $TMPDIR, about 15 minutes on 2
# cores). Run from the Makefile
# (it exports GOWORK/GOFLAGS for gotch) or with the same environment.
# DEDUP_N (default 1000000) sizes the dedup corpus.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${EVOLM_PYTHON:-$root/.venv/bin/python}
runs=${BENCH_RUNS:-3}
only=${BENCH_ONLY:-go judge engine grpo tokenizer dedup parquet dist dp fleet}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

header() {
	echo
	echo "=== $1"
	echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

for b in $only; do
	case $b in
	go)
		header "Go benchmarks (go test -bench, -count $runs; bench/openai's BenchmarkThroughput included)"
		go test -run '^$' -bench . -benchmem -count "$runs" ./...
		;;
	judge)
		go build -o "$tmp/judge-bench" ./bench/judge
		for preset in tiny small; do
			reps=3
			[ "$preset" = tiny ] && reps=20 # a tiny call takes a few ms: more calls per run
			for threads in 1 2; do
				header "bench/judge: yes/no judging, prefix reuse vs the same batching without it, policy phase (one rubric per response), preset $preset, $threads thread(s)"
				"$tmp/judge-bench" -preset "$preset" -threads "$threads" -runs "$runs" -reps "$reps"
			done
		done
		header "bench/judge: the same, rubric phase (8 rubrics per response, one prefill for them)"
		"$tmp/judge-bench" -preset small -threads 1 -runs "$runs" -responses 2 -rubrics 8
		header "bench/judge: the rubric phase through evolm serve, one engine call per request vs coalesced"
		"$tmp/judge-bench" -preset small -threads 1 -runs "$runs" -responses 2 -rubrics 8 -serve
		;;
	judge-1.7b)
		go build -o "$tmp/judge-bench" ./bench/judge
		for threads in 2 1; do
			header "bench/judge: yes/no judging, prefix reuse vs the same batching without it, policy phase, preset qwen3-1.7b (the paper's judge, random weights), $threads thread(s), one request per call"
			"$tmp/judge-bench" -preset qwen3-1.7b -threads "$threads" -runs "$runs" -reps 1 -responses 1
		done
		;;
	engine)
		for preset in tiny small; do
			for threads in 1 2; do
				header "bench/engine: evolm vs HF transformers, preset $preset, $threads thread(s)"
				"$py" bench/engine/compare.py --preset "$preset" --threads "$threads" --runs "$runs"
			done
		done
		;;
	grpo)
		header "bench/grpo: one GRPO step, evolm vs TRL's step in PyTorch"
		"$py" bench/grpo/compare.py --preset small --runs "$runs"
		;;
	tokenizer)
		header "bench/tokenizer: evolm vs HF tokenizers"
		"$py" bench/tokenizer/compare.py --runs "$runs"
		;;
	dedup)
		header "bench/dedup: evolm dedup vs datatrove MinHash"
		"$py" bench/dedup/bench_dedup.py --n "${DEDUP_N:-1000000}" --runs "$runs"
		;;
	parquet)
		header "bench/parquet: evolm vs pyarrow"
		bench/parquet/run.sh --runs "$runs"
		;;
	dist)
		header "bench/dist: all-reduce bandwidth, model/dist (Go on c10d gloo) vs torch.distributed gloo, 2 ranks"
		go run ./bench/dist -sizes 1,16,64 -ranks 2 -runs "$runs"
		;;
	dp)
		header "bench/dp: evolm run as 1 process vs 2 data-parallel ranks (Gloo), ZeRO 0 and 1; model/dist all-reduce vs torch.distributed"
		bench/dp/run.sh
		;;
	fleet)
		header "bench/fleet: a loop step in process vs on 2 evolm serve processes; weight-sync time, LoRA vs full weights"
		bench/fleet/run.sh --preset small
		;;
	*)
		echo "bench.sh: unknown benchmark $b (want go judge judge-1.7b engine grpo tokenizer dedup parquet dist dp fleet)" >&2
		exit 2
		;;
	esac
done
