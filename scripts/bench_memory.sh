#!/usr/bin/env bash
# bench_memory.sh — peak RSS and time of ONE GRPO step (fp32, CPU) for the
# four learner configurations of issue #10, each in a process of its own,
# beside `evolm plan`'s estimate (model/plan) of the same configuration.
#
#   scripts/bench_memory.sh [-l "4 8"] [-m "full chunked checkpoint lora"] [-M BYTES] [-o FILE]
#   scripts/bench_memory.sh -t FILE     # only print the table of FILE, re-planned
#
# -l lists decoder-layer counts of the qwen3-0.6b widths (0: all 28 layers);
# the default "4 8" fits a 24 GiB machine shared with other work. -M is
# glibc's M_MMAP_THRESHOLD for the runs: 1048576 (default) as evolm's
# torch.mmap_threshold, 0 for glibc's adaptive default. Before each
# run the script compares MemAvailable with the plan's estimate plus 2 GiB
# and skips the run when it does not fit. Results are JSON lines (one per
# run, bench/memory's Result plus the /usr/bin/time maximum RSS) appended to
# FILE (default bench/memory/results.jsonl); the table re-plans every row
# with the current model/plan, so a calibration change shows without
# measuring again.
set -euo pipefail
cd "$(dirname "$0")/.."
layers="4 8"
modes="full chunked checkpoint lora"
out=bench/memory/results.jsonl
table_only=""
mmap=1048576
while getopts "l:m:M:o:t:" opt; do
	case $opt in
	l) layers=$OPTARG ;;
	m) modes=$OPTARG ;;
	M) mmap=$OPTARG ;;
	o) out=$OPTARG ;;
	t) table_only=$OPTARG ;;
	*) exit 2 ;;
	esac
done
bin=bin/memory-bench
go build -o "$bin" ./bench/memory

common=(-preset qwen3-0.6b -seq 1024 -micro-batch 2 -threads 2)

if [[ -z $table_only ]]; then
	mkdir -p "$(dirname "$out")"
	for l in $layers; do
		for m in $modes; do
			est=$("$bin" "${common[@]}" -layers "$l" -mode "$m" -plan 2>/dev/null | sed -n 's/.*"plan_bytes":\([0-9]*\).*/\1/p')
			avail=$(($(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024))
			need=$((est + (2 << 30)))
			if ((avail < need)); then
				echo "skip layers=$l mode=$m: plan $((est >> 20)) MiB + 2 GiB > MemAvailable $((avail >> 20)) MiB" >&2
				continue
			fi
			echo "run layers=$l mode=$m (plan $((est >> 20)) MiB, available $((avail >> 20)) MiB)" >&2
			tv=$(mktemp)
			json=$(nice -n 10 /usr/bin/time -v "$bin" "${common[@]}" -layers "$l" -mode "$m" -mmap-threshold "$mmap" 2>"$tv" | tail -1)
			maxrss=$(($(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$tv") * 1024))
			rm -f "$tv"
			echo "${json%\}},\"time_max_rss_bytes\":$maxrss}" | tee -a "$out"
		done
	done
	table_only=$out
fi

# The table: measured peak (VmHWM) against the current plan.
echo
echo "| layers | params | configuration | host malloc | step (s) | peak RSS measured | evolm plan | plan / measured |"
echo "|---:|---:|---|---|---:|---:|---:|---:|"
while IFS= read -r line; do
	[[ -z $line ]] && continue
	get() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$line" | tr -d '"'; }
	l=$(get layers) m=$(get mode) peak=$(get peak_rss_bytes) secs=$(get step_seconds) params=$(get params) mm=$(get mmap_threshold)
	malloc=$(if [[ ${mm:-0} == 0 ]]; then echo "glibc adaptive"; elif ((mm % 1048576 == 0)); then echo "mmap ≥ $((mm >> 20)) MiB"; else echo "mmap ≥ $mm B"; fi)
	est=$("$bin" "${common[@]}" -layers "$l" -mode "$m" -plan 2>/dev/null | sed -n 's/.*"plan_bytes":\([0-9]*\).*/\1/p')
	name=$(case $m in
		full) echo "full FT, unchunked logits" ;;
		chunked) echo "full FT + chunked log-probs" ;;
		checkpoint) echo "full FT + chunked + checkpointing" ;;
		lora) echo "LoRA r16 + chunked + checkpointing" ;;
		esac)
	awk -v l="$l" -v p="$params" -v n="$name" -v m="$malloc" -v s="$secs" -v a="$peak" -v b="$est" 'BEGIN {
		printf "| %d | %.0fM | %s | %s | %.0f | %.2f GiB | %.2f GiB | %+.1f%% |\n", l, p / 1e6, n, m, s, a / 2^30, b / 2^30, (b / a - 1) * 100 }'
done <"$table_only"
