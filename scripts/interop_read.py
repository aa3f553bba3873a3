"""Reads a run directory that evolm wrote, with pyarrow, DuckDB and polars.

usage: interop_read.py RUN_DIR EXPECTED_JSON

EXPECTED_JSON (written by pipeline/interop_test.go) maps each table to its
columns as evolm declares them (name, type as pyarrow prints it, nullable),
its files and, per file, the rows evolm put in it (as Arrow's JSON rendering
of the in-memory batch). Every column must read back in pyarrow with the
declared type. TYPES below is written here independently of the Go code, from
the table layouts of the design: the columns it names must also have exactly these types (columns
added later are checked against the declaration only).

Prints "ok <n> checks" and exits 0, or raises on the first mismatch.
"""
import json
import math
import sys
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

S, I32, I64, F32, F64, B = pa.string(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.bool_()
MESSAGES = pa.list_(pa.struct([("role", S), ("content", S)]))
CRITERIA = pa.list_(pa.struct([("criterion", S), ("weight", F64)]))
LEVELS = pa.list_(pa.list_(pa.struct([("score", S), ("text", S)])))

# column -> (type, nullable)
TYPES = {
    "prompts": {
        "prompt_id": (S, False), "dataset": (S, False), "source": (S, False), "source_id": (S, False),
        "category": (S, False), "prompt": (S, False), "messages": (MESSAGES, False),
    },
    "rollouts": {
        "rollout_id": (S, False), "prompt_id": (S, False), "sample_idx": (I32, False), "role": (S, False),
        "phase": (S, False), "step": (I64, False), "text": (S, False), "prompt_tokens": (I32, False),
        "completion_tokens": (I32, False), "finish_reason": (S, False), "token_logprobs": (pa.list_(F32), False),
        "model": (S, False), "checkpoint": (S, False), "seed": (I64, False), "temperature": (F64, False),
        "top_p": (F64, False), "top_k": (I32, False), "token_ids_source": (S, True),
    },
    "pairs": {
        "pair_id": (S, False), "prompt_id": (S, False), "step": (I64, False), "question": (S, False),
        "chosen": (S, False), "rejected": (S, False), "strategy": (S, False), "chosen_rollout_id": (S, False),
        "rejected_rollout_id": (S, False), "chosen_step": (I64, False), "rejected_step": (I64, False),
        "inferred_question": (S, True),
    },
    "rubrics": {
        "rubric_id": (S, False), "item_id": (S, False), "phase": (S, False), "step": (I64, False),
        "sample_idx": (I32, False), "rollout_id": (S, False), "raw_text": (S, False), "criteria": (CRITERIA, False),
        "format_ok": (B, False), "parse_error": (S, True), "scoring_levels": (LEVELS, True),
    },
    "judgments": {
        "judgment_id": (S, False), "response_id": (S, False), "rubric_id": (S, False), "phase": (S, False),
        "step": (I64, False), "judge_model": (S, False), "judge_mode": (S, False), "prompt_version": (S, False),
        "criterion_scores": (pa.list_(F64), False), "score": (F64, True), "score_missing_reason": (S, True),
        "raw_text": (S, False),
    },
    "steps": {
        "step": (I64, False), "phase": (S, False), "loss": (F64, False), "kl": (F64, False),
        "clip_frac": (F64, False), "grad_norm": (F64, False), "lr": (F64, False), "reward_mean": (F64, False),
        "reward_std": (F64, False), "resp_len_mean": (F64, False), "entropy": (F64, False),
        "zero_std_frac": (F64, False), "reward_temporal": (F64, True), "reward_backtranslate": (F64, True),
        "reward_rubric_guided": (F64, True), "count_temporal": (I64, False), "count_backtranslate": (I64, False),
        "count_rubric_guided": (I64, False), "format_rate": (F64, True), "judge_missing_rate": (F64, False),
        "elapsed_s": (F64, False), "skipped_updates": (I64, False),
        "refill_prompts": (I64, True), "refill_rounds": (I64, True), "groups_trained": (I64, True),
        "resp_len_p50": (F64, True), "resp_len_p95": (F64, True), "truncated_frac": (F64, True),
        "rubric_len_mean": (F64, True), "rubric_len_p50": (F64, True), "rubric_len_p95": (F64, True),
        "margin_mean": (F64, True), "tokens_per_s": (F64, True),
        "time_generation_s": (F64, True), "time_rubrics_s": (F64, True), "time_judge_s": (F64, True),
        "time_ref_logprobs_s": (F64, True), "time_learner_s": (F64, True), "time_weight_sync_s": (F64, True),
        "time_writes_s": (F64, True), "time_checkpoint_s": (F64, True), "time_other_s": (F64, True),
    },
    "dedup_report": {
        "cluster_id": (I64, False), "kept_id": (S, False), "removed_ids": (pa.list_(S), False),
        "method": (S, False), "similarity": (F64, False),
    },
}

# Schema versions that are not 1 (steps 2: skipped_updates; steps 3: refill_prompts,
# refill_rounds, groups_trained; steps 4: length percentiles, truncated_frac, rubric
# lengths, margin_mean, tokens_per_s, time_*_s; pairs 2: temporal_age, temporal_fallback;
# rubrics 2: scoring_levels).
VERSIONS = {"rollouts": b"2", "steps": b"4", "pairs": b"2", "rubrics": b"2"}

checks = 0


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(msg)


def same_type(want, got):
    """Type equality that ignores list element names ("item" vs "element")."""
    if pa.types.is_list(want):
        return pa.types.is_list(got) and same_type(want.value_type, got.value_type)
    if pa.types.is_struct(want):
        return (pa.types.is_struct(got) and want.num_fields == got.num_fields and all(
            want.field(i).name == got.field(i).name and same_type(want.field(i).type, got.field(i).type)
            for i in range(want.num_fields)))
    return want == got


def type_str(t):
    """pyarrow's type string with list element names normalized to "item"."""
    if pa.types.is_list(t):
        return f"list<item: {type_str(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{t.field(i).name}: {type_str(t.field(i).type)}" for i in range(t.num_fields)) + ">"
    return str(t)


def same_value(want, got):
    if isinstance(want, float) or isinstance(got, float):
        if want is None or got is None:
            return want is got
        return math.isclose(float(want), float(got), rel_tol=0, abs_tol=0) or float(want) == float(got)
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(same_value(w, g) for w, g in zip(want, got))
    if isinstance(want, dict):
        return isinstance(got, dict) and want.keys() == got.keys() and all(same_value(want[k], got[k]) for k in want)
    return want == got


def partitions(rel):
    """Hive partitions in a run-relative path: {"phase": "policy", "step": "1"}."""
    return dict(c.split("=", 1) for c in rel.split("/")[:-1] if "=" in c)


def check_pyarrow(run, expected):
    for table, spec in expected.items():
        declared = {name: (typ, nullable) for name, typ, nullable in spec["columns"]}
        for name, (typ, nullable) in TYPES[table].items():
            check(name in declared, f"{table}: evolm does not declare column {name}")
            check(type_str(typ) == declared[name][0] and declared[name][1] == nullable,
                  f"{table}: evolm declares {name} as {declared[name]}, the layout wants {typ} nullable={nullable}")
        want = [name for name, _, _ in spec["columns"]]
        for rel, rows in spec["files"].items():
            path = run / rel
            parts = partitions(rel)
            # As in Hive, partition columns live in the path, not the file.
            file_cols = [c for c in want if c not in parts]
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
            check(schema.names == file_cols, f"{rel}: columns {schema.names}, want {file_cols}")
            for name in file_cols:
                f = schema.field(name)
                typ, nullable = declared[name]
                check(type_str(f.type) == typ, f"{rel}: column {name} reads as {type_str(f.type)}, evolm declared {typ}")
                check(f.nullable == nullable, f"{rel}: column {name} nullable={f.nullable}, declared {nullable}")
                if name in TYPES[table]:
                    check(same_type(TYPES[table][name][0], f.type), f"{rel}: column {name} is {f.type}, the layout wants {TYPES[table][name][0]}")
            for name, (typ, nullable) in TYPES[table].items():
                if name not in parts:
                    check(name in schema.names, f"{rel}: no column {name}")
            md = schema.metadata or {}
            check(md.get(b"evolm.table") == table.encode(), f"{rel}: schema metadata evolm.table = {md.get(b'evolm.table')}")
            want_version = VERSIONS.get(table, b"1")
            check(md.get(b"evolm.schema_version") == want_version, f"{rel}: schema version {md.get(b'evolm.schema_version')}, want {want_version}")
            meta = pf.metadata
            kv = meta.metadata
            check(kv.get(b"evolm.stage") == b"interop", f"{rel}: footer evolm.stage = {kv.get(b'evolm.stage')}")
            for k in (b"evolm.config_hash", b"evolm.code_version", b"evolm.inputs"):
                check(k in kv, f"{rel}: footer lacks {k}")
            for rg in range(meta.num_row_groups):
                for c in range(meta.num_columns):
                    col = meta.row_group(rg).column(c)
                    check(col.compression == "ZSTD", f"{rel}: {col.path_in_schema} compression {col.compression}")
                    check(col.is_stats_set, f"{rel}: {col.path_in_schema} has no statistics")
            got = pf.read().to_pylist()
            check(len(got) == len(rows), f"{rel}: {len(got)} rows, want {len(rows)}")
            for i, (w, g) in enumerate(zip(rows, got)):
                for k in file_cols:
                    check(same_value(w.get(k), g[k]), f"{rel} row {i} column {k}: pyarrow read {g[k]!r}, evolm wrote {w.get(k)!r}")
                for k, v in parts.items():
                    if k in want:
                        pv = int(v) if isinstance(w[k], int) else v
                        check(w[k] == pv, f"{rel} row {i}: evolm's {k} {w[k]!r} is not the partition's {v}")
    # The whole table through pyarrow's own Hive discovery.
    t = pq.read_table(run / "rollouts")
    st = t.schema.field("step").type
    st = st.value_type if pa.types.is_dictionary(st) else st  # read_table dictionary-encodes partitions
    check(pa.types.is_integer(st), f"pyarrow infers step as {t.schema.field('step').type}, want an integer")
    by = {}
    for phase, step in zip(t.column("phase").to_pylist(), t.column("step").to_pylist()):
        by[f"{phase}/{step}"] = by.get(f"{phase}/{step}", 0) + 1
    want = {k: v["rows"] for k, v in expected["rollouts"]["partitions"].items()}
    check(by == want, f"pyarrow dataset rollouts by partition {by}, want {want}")


def check_duckdb(run, expected):
    con = duckdb.connect()
    glob = str(run / "rollouts" / "**" / "*.parquet")
    # evolm writes the step in plain decimal (step=12), which DuckDB infers
    # as BIGINT with no hive_types: the README's query as written.
    got = con.execute(
        f"SELECT phase, step, count(*) AS n, sum(len(token_logprobs)) AS lp "
        f"FROM read_parquet('{glob}', hive_partitioning=true) "
        f"GROUP BY phase, step ORDER BY phase, step").fetchall()
    want = sorted((k.split("/")[0], int(k.split("/")[1]), v["rows"], v["logprobs"]) for k, v in expected["rollouts"]["partitions"].items())
    check([tuple(r) for r in got] == want, f"duckdb rollouts by partition: {got}, want {want}")
    typ = con.execute(f"SELECT DISTINCT typeof(step) FROM read_parquet('{glob}', hive_partitioning=true)").fetchall()
    check(typ == [("BIGINT",)], f"duckdb infers step as {typ}, want BIGINT")
    got = con.execute(
        f"SELECT step FROM read_parquet('{glob}', hive_partitioning=true) WHERE step > 1 LIMIT 1").fetchall()
    check(got == [(50,)], f"duckdb: step > 1 selects {got}, want step 50 (an integer comparison)")
    # The partition columns come from the paths; the step column inside the
    # files agrees with them.
    bad = con.execute(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true, union_by_name=true) "
                      f"WHERE typeof(token_logprobs) <> 'FLOAT[]'").fetchone()[0]
    check(bad == 0, "duckdb: token_logprobs is not FLOAT[]")
    roles = con.execute(
        f"SELECT m.role, count(*) FROM read_parquet('{run}/prompts/**/*.parquet', hive_partitioning=true), "
        f"unnest(messages) AS t(m) GROUP BY 1 ORDER BY 1").fetchall()
    check([tuple(r) for r in roles] == [tuple(x) for x in expected["prompts"]["roles"]], f"duckdb message roles {roles}, want {expected['prompts']['roles']}")
    w = con.execute(f"SELECT round(sum(c.weight), 6) FROM read_parquet('{run}/rubrics/**/*.parquet'), unnest(criteria) AS t(c)").fetchone()[0]
    check(abs(w - expected["rubrics"]["weight_sum"]) < 1e-6, f"duckdb criteria weight sum {w}, want {expected['rubrics']['weight_sum']}")


def check_polars(run, expected):
    df = pl.read_parquet(str(run / "rollouts" / "**" / "*.parquet"), hive_partitioning=True)
    check(df.schema["token_logprobs"] == pl.List(pl.Float32), f"polars token_logprobs {df.schema['token_logprobs']}")
    n = sum(v["rows"] for v in expected["rollouts"]["partitions"].values())
    check(df.height == n, f"polars rollouts rows {df.height}, want {n}")
    check(df.schema["step"].is_integer(), f"polars infers step as {df.schema['step']}, want an integer")
    by = df.group_by("phase").len().sort("phase").rows()
    want = {}
    for k, v in expected["rollouts"]["partitions"].items():
        want[k.split("/")[0]] = want.get(k.split("/")[0], 0) + v["rows"]
    check(by == sorted(want.items()), f"polars rows by phase {by}, want {sorted(want.items())}")
    p = pl.read_parquet(str(run / "prompts" / "**" / "*.parquet"))
    check(p.schema["messages"] == pl.List(pl.Struct({"role": pl.String, "content": pl.String})), f"polars messages {p.schema['messages']}")


def main():
    run, expected = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    check_pyarrow(run, expected)
    check_duckdb(run, expected)
    check_polars(run, expected)
    print(f"ok {checks} checks")


if __name__ == "__main__":
    main()
