"""Rubric statistics as the official EVOLM script defines them, for evolm's cross-check.

Reads a JSON list of rubric generator outputs on stdin and prints a JSON list
with, for each, the criterion texts read from it and its statistics
(criteria_count, avg_criterion_len, label_only_pct, specific_pct,
constraint_pct). The definitions follow stellalisy/EvoLM
scripts/eval/rubric_aggregate_stats.py (extract_criteria,
compute_rubric_stats); written here from their description, not copied.
This runs in Python's own re and json, so that its Unicode semantics are
the reference the Go port (stages/analyze/official.go) is checked against.
"""
import json
import re
import sys

LABEL_MAX = 40
THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
FALLBACK = re.compile(r'"criterion"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"weight"\s*:\s*([\d.]+)')
SPECIFIC = re.compile(r"\d+\.?\d*|= |equals |formula|equation|code|pattern|exact|verbatim", re.IGNORECASE)
CONSTRAINT = re.compile(
    r"\bavoid\w*\b|\bexclud\w*\b|\bkeyword\b|\bmust not\b|\bshould not\b|\bdo not\b"
    r"|\bprohibit\b|\brestrict\b|\bforbid\w*\b",
    re.IGNORECASE,
)


def criteria(text):
    text = THINK.sub("", text).strip()
    start = text.find("{")
    if start >= 0:
        depth = 0
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if depth == 0:
                try:
                    doc = json.loads(text[start:i + 1])
                except json.JSONDecodeError:
                    break
                return [c.get("criterion", "") for c in doc.get("criteria", [])]
    out = []
    for m in FALLBACK.finditer(text):
        out.append(m.group(1).replace('\\"', '"').replace("\\n", " "))
    return out


def stats(texts):
    n = len(texts)
    if n == 0:
        return dict(criteria_count=0, avg_criterion_len=0, label_only_pct=0, specific_pct=0, constraint_pct=0)

    def pct(pred):
        return sum(1 for t in texts if pred(t)) / n * 100

    return dict(
        criteria_count=n,
        avg_criterion_len=sum(len(t) for t in texts) / n,
        label_only_pct=pct(lambda t: len(t) <= LABEL_MAX),
        specific_pct=pct(lambda t: SPECIFIC.search(t) is not None),
        constraint_pct=pct(lambda t: CONSTRAINT.search(t) is not None),
    )


def main():
    out = []
    for text in json.load(sys.stdin):
        cs = criteria(text)
        out.append(dict(criteria=cs, **stats(cs)))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
