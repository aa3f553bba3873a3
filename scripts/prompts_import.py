"""The official EVOLM prompts, read from a user's clone, for `evolm prompts import`.

Reads a JSON request on stdin:

    {"checkout": "<path of a clone of stellalisy/EvoLM>",
     "types": ["judge", ...],                       # message types to render
     "contents": [{"question": ..., "answer": ..., "rubric": ...}, ...]}

loads open_instruct/search_rewards/utils/rubric_chat_templates.py from the
clone (that file alone, not the open_instruct package), and calls its
format_messages(message_type, content, tokenize=False) for every type and
every content. It prints one JSON object:

    {"module": "<the module's path in the clone>", "sha256": "<of the file>",
     "messages": {"<type>": [[{"role": ..., "content": ...}, ...], ...]}}

with one message list per content, in order, or, when something is missing,
{"error": "<what is missing, named>"} (exit status 2). evolm holds none of the
official text: it turns these messages into its own template files.
"""
import hashlib
import importlib.util
import json
import os
import sys

MODULE = os.path.join("open_instruct", "search_rewards", "utils", "rubric_chat_templates.py")
REGISTRY = "MESSAGE_FORMATTER_REGISTRY"
FUNCTION = "format_messages"


class Missing(Exception):
    """Something the import needs is not in the checkout."""


def load(checkout):
    if not os.path.isdir(checkout):
        raise Missing(f"checkout {checkout!r}: no such directory (clone https://github.com/stellalisy/EvoLM)")
    path = os.path.join(checkout, MODULE)
    if not os.path.isfile(path):
        raise Missing(f"checkout {checkout!r} has no module {MODULE}: is it a clone of stellalisy/EvoLM?")
    spec = importlib.util.spec_from_file_location("evolm_import_rubric_chat_templates", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the module's own error, named
        raise Missing(f"module {MODULE} does not load with {sys.executable}: {type(e).__name__}: {e}") from e
    fn = getattr(module, FUNCTION, None)
    if not callable(fn):
        raise Missing(f"module {MODULE} has no function {FUNCTION}")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return module, fn, digest


def render(module, fn, message_type, content):
    registry = getattr(module, REGISTRY, None)
    if isinstance(registry, dict) and message_type not in registry:
        raise Missing(f"message type {message_type!r} is not in {MODULE}'s {REGISTRY} (it has: {', '.join(registry)})")
    try:
        msgs = fn(message_type, dict(content), tokenize=False)
    except KeyError as e:
        raise Missing(
            f"{FUNCTION}({message_type!r}) needs content key {e.args[0]!r}; evolm fills {', '.join(sorted(content))}"
        ) from e
    except ValueError as e:
        raise Missing(f"{FUNCTION}({message_type!r}) failed: {e}") from e
    ok = isinstance(msgs, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in msgs
    )
    if not ok:
        raise Missing(
            f"{FUNCTION}({message_type!r}, tokenize=False) returned {type(msgs).__name__}, "
            "not a list of {'role': str, 'content': str} messages"
        )
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


def main():
    req = json.load(sys.stdin)
    try:
        module, fn, digest = load(req["checkout"])
        out = {t: [render(module, fn, t, c) for c in req["contents"]] for t in req["types"]}
    except Missing as e:
        json.dump({"error": str(e)}, sys.stdout)
        return 2
    json.dump({"module": MODULE, "sha256": digest, "messages": out}, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
