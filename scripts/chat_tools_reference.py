"""Token ids of conversations with tools, as transformers renders them.

Usage: chat_tools_reference.py TOKENIZER_DIR < CASES.json

CASES.json is a list of {"messages": [...], "tools": [...] or null,
"add_generation_prompt": bool, "continue_final_message": bool,
"enable_thinking": bool or null}; tool-call arguments are JSON objects (as
vLLM hands them to the template). Prints the JSON list of token-id lists of
transformers' apply_chat_template(tokenize=True) with the checkpoint's own
tokenizer and chat template.
"""
import json
import sys

from transformers import AutoTokenizer


def main():
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
    out = []
    for case in json.load(sys.stdin):
        kwargs = {}
        if case.get("enable_thinking") is not None:
            kwargs["enable_thinking"] = case["enable_thinking"]
        out.append(tok.apply_chat_template(
            case["messages"], tools=case.get("tools"), tokenize=True,
            add_generation_prompt=case.get("add_generation_prompt", False),
            continue_final_message=case.get("continue_final_message", False), **kwargs))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
