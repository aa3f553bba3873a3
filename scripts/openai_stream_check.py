"""Stream from `evolm serve` with the official `openai` Python package.

Usage: openai_stream_check.py BASE_URL MODEL

For completions (a text prompt and a token-id prompt) and chat completions,
asks once without and once with stream=True and
stream_options={"include_usage": True}, with the same seed, n=2 and
log-probs, and asserts that:
  - the chunks parse into the package's own types;
  - each choice's joined text equals its non-streamed text, and its last
    chunk carries the same finish_reason;
  - the chunks' log-probs, joined, are the non-streamed ones;
  - a chat stream begins each choice with the role;
  - the last chunk has no choices and the usage of the non-streamed answer.
Prints a JSON summary on stdout.
"""
import json
import sys

import openai
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk


def check_completions(client, model, prompt):
    kw = dict(model=model, prompt=prompt, max_tokens=12, n=2, seed=7, temperature=1.0, logprobs=2)
    plain = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert all(isinstance(c, Completion) for c in chunks), [type(c) for c in chunks]
    *body, last = chunks
    assert last.choices == [] and last.usage is not None, last
    assert last.usage == plain.usage, (last.usage, plain.usage)
    out = []
    for want in plain.choices:
        mine = [c for ch in body for c in ch.choices if c.index == want.index]
        text = "".join(c.text for c in mine)
        assert text == want.text, (want.index, text, want.text)
        assert mine[-1].finish_reason == want.finish_reason, (mine[-1].finish_reason, want.finish_reason)
        assert all(c.finish_reason is None for c in mine[:-1]), [c.finish_reason for c in mine]
        toks = [t for c in mine if c.logprobs for t in c.logprobs.tokens]
        lps = [v for c in mine if c.logprobs for v in c.logprobs.token_logprobs]
        assert toks == want.logprobs.tokens, (toks, want.logprobs.tokens)
        assert lps == want.logprobs.token_logprobs, (lps, want.logprobs.token_logprobs)
        out.append({"text": text, "chunks": len(mine), "finish_reason": want.finish_reason})
    return {"choices": out, "usage": plain.usage.model_dump()}


def check_chat(client, model):
    kw = dict(model=model, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=10, n=2, seed=3,
              temperature=1.0, logprobs=True, top_logprobs=2)
    plain = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks), [type(c) for c in chunks]
    *body, last = chunks
    assert last.choices == [] and last.usage == plain.usage, (last, plain.usage)
    out = []
    for want in plain.choices:
        mine = [c for ch in body for c in ch.choices if c.index == want.index]
        assert mine[0].delta.role == "assistant", mine[0]
        text = "".join(c.delta.content or "" for c in mine)
        assert text == want.message.content, (text, want.message.content)
        assert mine[-1].finish_reason == want.finish_reason
        toks = [t.token for c in mine if c.logprobs for t in c.logprobs.content]
        assert toks == [t.token for t in want.logprobs.content], toks
        out.append({"text": text, "chunks": len(mine), "finish_reason": want.finish_reason})
    return {"choices": out, "usage": plain.usage.model_dump()}


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    summary = {
        "completions": check_completions(client, model, "Once upon a time"),
        "token_ids": check_completions(client, model, [785, 3974, 13876, 38835]),
        "chat": check_chat(client, model),
        "openai": openai.__version__,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
