"""Reads an `evolm export` output with DuckDB and polars (the readers users
have) and checks column types, row counts, sort order, the margin column and
that the shards are zstd-compressed with statistics.

usage: export_check.py RUN_DIR EXPECTED_JSON
EXPECTED_JSON: {"export_responses": rows, "export_pairs": rows, "export_steps": rows}
Prints a JSON summary; exits non-zero with a message on the first failure.
"""
import glob
import json
import os
import sys

import duckdb
import polars as pl
import pyarrow.parquet as pq

run, expected = sys.argv[1], json.loads(sys.argv[2])


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def files(table):
    fs = sorted(glob.glob(os.path.join(run, table, "*.parquet")))
    return [f for f in fs if not os.path.basename(f).startswith(".")]


WANT_DUCK = {
    "export_responses": {
        "step": "BIGINT", "phase": "VARCHAR", "prompt_id": "VARCHAR", "prompt": "VARCHAR", "response": "VARCHAR",
        "sample_idx": "INTEGER", "score": "DOUBLE", "criterion_scores": "DOUBLE[]",
        "criteria": "STRUCT(criterion VARCHAR, weight DOUBLE)[]", "rubric_format_ok": "BOOLEAN", "step_kl": "DOUBLE",
    },
    "export_pairs": {
        "step": "BIGINT", "pair_id": "VARCHAR", "strategy": "VARCHAR", "score_chosen": "DOUBLE",
        "score_rejected": "DOUBLE", "margin": "DOUBLE", "rubric_sample_idx": "INTEGER", "chosen_step": "BIGINT",
    },
    "export_steps": {"step": "BIGINT", "phase": "VARCHAR", "kl": "DOUBLE", "reward_mean": "DOUBLE", "format_rate": "DOUBLE"},
}
WANT_POLARS = {
    "export_responses": {"step": pl.Int64, "score": pl.Float64, "sample_idx": pl.Int32, "criterion_scores": pl.List(pl.Float64),
                         "criteria": pl.List(pl.Struct({"criterion": pl.String, "weight": pl.Float64}))},
    "export_pairs": {"step": pl.Int64, "margin": pl.Float64, "strategy": pl.String},
    "export_steps": {"step": pl.Int64, "kl": pl.Float64},
}
SORT = {"export_responses": ["prompt_id", "sample_idx", "judgment_id"], "export_pairs": ["pair_id", "rubric_sample_idx"], "export_steps": ["step", "phase"]}

summary = {}
con = duckdb.connect()
for table, want_rows in expected.items():
    fs = files(table)
    if want_rows and not fs:
        fail(f"{table}: no files under {run}")
    if not fs:
        summary[table] = {"rows": 0}
        continue
    pattern = os.path.join(run, table, "*.parquet")
    # DuckDB, on the files as they are (they carry step and phase).
    rel = con.sql(f"SELECT * FROM read_parquet('{pattern}')")
    types = dict(zip(rel.columns, [str(t) for t in rel.types]))
    for col, t in WANT_DUCK[table].items():
        if types.get(col) != t:
            fail(f"duckdb {table}.{col}: type {types.get(col)}, want {t} (columns: {types})")
    n = con.sql(f"SELECT count(*) FROM read_parquet('{pattern}')").fetchone()[0]
    if n != want_rows:
        fail(f"duckdb {table}: {n} rows, want {want_rows}")
    if table == "export_responses":
        nulls = con.sql(f"SELECT count(*) FROM read_parquet('{pattern}') WHERE prompt IS NULL OR response IS NULL").fetchone()[0]
        if nulls:
            fail(f"duckdb {table}: {nulls} rows without their prompt or response text")
    if table == "export_pairs":
        bad = con.sql(f"SELECT count(*) FROM read_parquet('{pattern}') WHERE margin IS DISTINCT FROM score_chosen - score_rejected").fetchone()[0]
        if bad:
            fail(f"duckdb {table}: {bad} rows with margin != score_chosen - score_rejected")
    # polars.
    df = pl.read_parquet(fs)
    if df.height != want_rows:
        fail(f"polars {table}: {df.height} rows, want {want_rows}")
    for col, t in WANT_POLARS[table].items():
        if df.schema[col] != t:
            fail(f"polars {table}.{col}: dtype {df.schema[col]}, want {t}")
    # Each file sorted by its key; zstd with statistics.
    for f in fs:
        part = pl.read_parquet(f)
        if not part.equals(part.sort(SORT[table], nulls_last=False, maintain_order=True)):
            fail(f"{f}: not sorted by {SORT[table]}")
        md = pq.ParquetFile(f).metadata
        for rg in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(rg).column(c)
                if col.compression != "ZSTD":
                    fail(f"{f}: column {col.path_in_schema} compression {col.compression}")
                if not col.is_stats_set:
                    fail(f"{f}: column {col.path_in_schema} has no statistics")
    summary[table] = {"rows": n, "files": len(fs)}
print(json.dumps(summary))
