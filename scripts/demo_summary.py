"""Prints what a researcher looks at first in an evolm run directory, straight
from the Parquet shards with DuckDB: the steps table (reward, KL, clip
fraction, pairs per strategy, R_format rate) and a sample of rubrics.

    .venv/bin/python scripts/demo_summary.py runs/demo
"""
import sys

import duckdb

run = sys.argv[1] if len(sys.argv) > 1 else "runs/demo"
con = duckdb.connect()
q = lambda table: f"read_parquet('{run}/{table}/**/*.parquet', hive_partitioning=true, union_by_name=true)"
print(con.sql(f"""
    select step::int as step, phase, round(reward_mean, 3) as reward, round(reward_std, 3) as reward_std,
           round(kl, 5) as kl, round(clip_frac, 3) as clip, round(grad_norm, 3) as grad_norm,
           round(zero_std_frac, 2) as zero_std, count_temporal as temporal, count_backtranslate as backtr,
           count_rubric_guided as guided, round(format_rate, 2) as r_format, round(resp_len_mean, 1) as resp_len
    from {q('steps')} order by step"""))
print(con.sql(f"""
    select phase, strategy, count(*) as pairs, count(inferred_question) as with_inferred_question
    from {q('pairs')} group by all order by all"""))
print(con.sql(f"""
    select step::int as step, phase, format_ok, left(regexp_replace(raw_text, '\\s+', ' ', 'g'), 70) as rubric
    from {q('rubrics')} order by step desc limit 5"""))
