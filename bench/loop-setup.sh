# Sourced by the loop benchmarks (bench/dp/run.sh, bench/fleet/run.sh): it
# reads --preset and --steps, builds evolm, makes a tiny judge and a policy
# of the preset, deduplicates the bundled sample, and sets
#   preset steps   the arguments (defaults tiny, 4)
#   root py work   the repository, its Python, a scratch directory (removed on exit
#                  after the caller's own cleanup, `cleanup_extra`, if it defines one)
#   bin prompts    the built binary and the comma-separated prompt shards
# $1 names the benchmark in messages.
bench_name=$1
shift
preset=tiny
steps=4
while [ $# -gt 0 ]; do
	case $1 in
	--preset) preset=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	*) echo "$bench_name: unknown argument $1" >&2; exit 2 ;;
	esac
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${EVOLM_PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d "/tmp/evolm-${bench_name//\//-}.XXXXXX")
trap 'if declare -F cleanup_extra >/dev/null; then cleanup_extra; fi; rm -rf "$work"' EXIT
cd "$root"
go build -o "$work/evolm" ./cmd/evolm
bin=$work/evolm
"$bin" model init --arch qwen3 --preset "$preset" --seed 1 --out "$work/models/policy" >/dev/null
"$bin" model init --arch qwen3 --preset tiny --seed 2 --out "$work/models/judge" >/dev/null
"$bin" dedup --run-dir "$work/dedup" --input datasets/sample/tulu3_sample.parquet --progress off --log-level warn >/dev/null 2>&1
prompts=$(find "$work/dedup/prompts" -name '*.parquet' | sort | paste -sd, -)
