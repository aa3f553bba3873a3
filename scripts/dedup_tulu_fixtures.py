"""Write Tulu 3 preference-mixture files with pyarrow, good and bad, for the
datasets loader and dedup stage tests (the reference writer is pyarrow, the
library the published Hub files were written with).

usage: dedup_tulu_fixtures.py OUTDIR

Prints, as JSON, the rows of tulu.parquet as pyarrow reads them back.
"""

import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

MSG = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
SCHEMA = pa.schema(
    [("id", pa.string()), ("prompt", pa.string()), ("chosen", MSG), ("rejected", MSG), ("source", pa.string())]
)


def conv(user, answer):
    return [{"content": user, "role": "user"}, {"content": answer, "role": "assistant"}]


ROWS = [
    {
        "id": "allenai/tulu-3-sft-reused-on-policy-8b_1",
        "prompt": "What is the boiling point of water at the top of Mount Everest?",
        "chosen": conv("What is the boiling point of water at the top of Mount Everest?", "About 70 °C."),
        "rejected": conv("What is the boiling point of water at the top of Mount Everest?", "100 °C."),
        "source": "allenai/tulu-3-sft-reused-on-policy-8b",
    },
    {
        "id": "wildchat_2",
        "prompt": "Écris un poème sur la mer — en 4 vers. 🌊",
        "chosen": conv("Écris un poème sur la mer — en 4 vers. 🌊", "La mer…"),
        "rejected": [],
        "source": "allenai/tulu-3-wildchat-if-on-policy-8b",
    },
    {
        "id": "multi_3",
        "prompt": "And in Python?",
        "chosen": [
            {"content": "How do I sort a list in Go?", "role": "user"},
            {"content": "Use sort.Slice or slices.Sort.", "role": "assistant"},
            {"content": "And in Python?", "role": "user"},
            {"content": "Use sorted().", "role": "assistant"},
        ],
        "rejected": None,
        "source": "ai2-adapt-dev/tulu_v3.9_wildchat_100k",
    },
    {
        "id": "math_4",
        "prompt": "Solve 2x + 3 = 11.",
        "chosen": conv("Solve 2x + 3 = 11.", "x = 4"),
        "rejected": conv("Solve 2x + 3 = 11.", "x = 5"),
        "source": "allenai/tulu-3-sft-personas-math",
    },
]


def table(rows, schema=SCHEMA):
    return pa.Table.from_pylist(rows, schema=schema)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    good = table(ROWS)
    pq.write_table(good, os.path.join(out, "tulu.parquet"), row_group_size=2)
    # Legacy list naming (list<item: ...>), as older writers produce.
    pq.write_table(good, os.path.join(out, "tulu_legacy_lists.parquet"), use_compliant_nested_type=False)

    # Missing column: no prompt.
    pq.write_table(good.drop_columns(["prompt"]), os.path.join(out, "bad_missing_column.parquet"))
    # Wrong type: prompt is int64.
    wrong = good.set_column(1, "prompt", pa.array(range(len(ROWS)), pa.int64()))
    pq.write_table(wrong, os.path.join(out, "bad_wrong_type.parquet"))
    # Wrong type in a nested column: chosen is a plain string.
    wrong_chosen = good.set_column(2, "chosen", pa.array(["x"] * len(ROWS), pa.string()))
    pq.write_table(wrong_chosen, os.path.join(out, "bad_chosen_type.parquet"))
    # Null prompt at row 2.
    nulls = [dict(r) for r in ROWS]
    nulls[2]["prompt"] = None
    pq.write_table(table(nulls), os.path.join(out, "bad_null_prompt.parquet"))
    # Invalid UTF-8 in prompt at row 1 (bytes viewed as a string column,
    # which pyarrow does not validate on write).
    raw = [r["prompt"].encode() for r in ROWS]
    raw[1] = b"caf\xc3\x28 au lait"
    bad = good.set_column(1, "prompt", pa.array(raw, pa.binary()).view(pa.string()))
    pq.write_table(bad, os.path.join(out, "bad_utf8.parquet"))
    # Empty: the right schema, no rows.
    pq.write_table(table([]), os.path.join(out, "empty.parquet"))
    # Corrupt: a valid file cut in half.
    with open(os.path.join(out, "tulu.parquet"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "bad_corrupt.parquet"), "wb") as f:
        f.write(data[: len(data) // 2])

    back = pq.read_table(os.path.join(out, "tulu.parquet")).to_pylist()
    json.dump(back, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
