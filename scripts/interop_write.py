"""Writes a Parquet file in the Tulu 3 preference-mixture layout with pyarrow.

usage: interop_write.py OUT.parquet

Layout as published: id str, prompt str, chosen/rejected
list<struct<content: str, role: str>>, source str. Several row groups, snappy
(pyarrow's default), non-ASCII text. Prints the rows as JSON on stdout so the
Go test can compare what it reads.
"""
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq

MSG = pa.struct([("content", pa.string()), ("role", pa.string())])
SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt", pa.string()),
    ("chosen", pa.list_(MSG)), ("rejected", pa.list_(MSG)), ("source", pa.string()),
])


def main():
    rows = []
    for i in range(37):
        prompt = f"Prompt {i}: explain {'κβ' * (i % 3)} in {i % 5 + 1} sentences. 🙂"
        rows.append({
            "id": f"tulu-{i:04d}",
            "prompt": prompt,
            "chosen": [{"content": prompt, "role": "user"}, {"content": f"good answer {i}", "role": "assistant"}],
            "rejected": [{"content": prompt, "role": "user"}, {"content": "" if i % 7 == 0 else f"bad {i}", "role": "assistant"}],
            "source": ["ai2-adapt-dev/flan_v2", "allenai/tulu-3-sft-personas-math", "ai2-adapt-dev/wildchat"][i % 3],
        })
    t = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(t, sys.argv[1], row_group_size=10)
    json.dump(rows, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
