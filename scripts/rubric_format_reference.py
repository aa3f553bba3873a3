"""R_format as the official EVOLM code decides it, for evolm's lenient-mode test.

Reads a JSON list of generator outputs on stdin and prints a JSON list of
verdicts (1.0 or 0.0). The rule follows stellalisy/EvoLM:
open_instruct/search_rewards/rubric_judge_rewards.py is_valid_rubric_format
with run_utils.py extract_json_from_response; written here from their
description, not copied. Thinking is removed before this is called (evolm's
StripThink), so the inputs hold no <think> blocks.
"""
import json
import math
import sys

import json_repair


def extract(text):
    # The span from the first "{" to the last "}", repaired.
    start, end = text.find("{"), text.rfind("}") + 1
    if start < 0:
        return None
    return json_repair.loads(text[start:end])


def r_format(text):
    text = text.strip()
    if not text:
        return 0.0
    doc = extract(text)
    if not isinstance(doc, dict):
        return 0.0
    crits = doc.get("criteria")
    if not isinstance(crits, list) or len(crits) < 2:
        return 0.0
    total = 0.0
    for c in crits:
        if not isinstance(c, dict) or "criterion" not in c or "weight" not in c:
            return 0.0
        try:
            w = float(c["weight"])
        except (TypeError, ValueError):
            return 0.0
        if w <= 0:
            return 0.0
        total += w
    # abs(nan - 1) > 0.15 is False: the official check passes a NaN sum.
    return 0.0 if abs(total - 1.0) > 0.15 else 1.0


if __name__ == "__main__":
    print(json.dumps([r_format(t) for t in json.load(sys.stdin)]))
