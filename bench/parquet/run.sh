#!/usr/bin/env bash
# Side-by-side Parquet benchmark, evolm against pyarrow, in one invocation:
#   bench/parquet/run.sh [--rows N] [--runs N]
# Builds the Go side, then runs run.py with the project's venv (make venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${EVOLM_PYTHON:-$root/.venv/bin/python}
bin=$(mktemp -d)/parquet-bench
(cd "$root" && go build -o "$bin" ./bench/parquet)
PARQUET_BENCH_BIN=$bin exec "$py" "$root/bench/parquet/run.py" "$@"
