"""A generative judge's score as the official EVOLM code reads it, for
evolm's test of prompts.ParseJudgeOfficial (rubric.judge_reply: official).

Reads a JSON list of judge replies on stdin and prints a JSON list with, for
each, the score as a number, or null where the official code gets NaN (no
JSON, no "score", a score float() cannot read, or a non-finite one). The rule
follows stellalisy/EvoLM: open_instruct/search_rewards/rubric_judge_rewards.py
judge_answer_with_rubric over run_utils.py extract_json_from_response; written
here from their description, not copied: the span from the first "{" to the
last "}" of the raw reply (thinking not removed), repaired with json_repair,
then float() of its "score", with no range check.
"""
import json
import math
import sys

import json_repair


def extract(text):
    start, end = text.find("{"), text.rfind("}") + 1
    if start < 0:
        return None
    return json_repair.loads(text[start:end])


def score(reply):
    result = extract(reply)
    if not result or not isinstance(result, dict) or "score" not in result:
        return None
    try:
        value = float(result["score"])
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


if __name__ == "__main__":
    print(json.dumps([score(r) for r in json.load(sys.stdin)]))
