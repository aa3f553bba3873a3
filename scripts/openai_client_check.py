"""Talk to `evolm serve` with the official `openai` Python package.

Usage: openai_client_check.py BASE_URL MODEL [fake|engine]

Calls models, completions (n, seed, stop, logprobs), chat completions
(logprobs + top_logprobs) and two bad requests, asserts that every response
parses into the package's own types with well-formed fields, and prints a JSON
summary on stdout for the Go test to compare with what the server's generator
produced. Mode "fake" (the default) also checks what the Go tests' test
double must have produced; mode "engine" (a real model behind the server)
checks only the shapes and types.
"""
import json
import sys

import openai
from openai.types import Completion
from openai.types.chat import ChatCompletion


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    fake = (sys.argv[3] if len(sys.argv) > 3 else "fake") == "fake"
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)

    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [model], ids

    comp = client.completions.create(
        model=model, prompt="Hello there", max_tokens=5, n=2, seed=7, stop=[" x9"], logprobs=3, temperature=0.8
    )
    assert isinstance(comp, Completion), type(comp)
    assert comp.object == "text_completion" and comp.model == model and comp.id.startswith("cmpl-")
    assert isinstance(comp.created, int)
    assert [c.index for c in comp.choices] == [0, 1], comp.choices
    for c in comp.choices:
        assert isinstance(c.text, str)
        assert c.finish_reason in ("stop", "length"), c.finish_reason
        lp = c.logprobs
        assert lp is not None
        n = len(lp.tokens)
        assert all(isinstance(t, str) for t in lp.tokens)
        assert len(lp.token_logprobs) == n and all(isinstance(v, float) and v <= 0 for v in lp.token_logprobs)
        # The sampled token and the 3 most likely: 3 or 4 entries (OpenAI's
        # and vLLM's logprobs+1).
        assert len(lp.top_logprobs) == n and all(isinstance(d, dict) and 0 < len(d) <= 4 for d in lp.top_logprobs)
        assert all(isinstance(k, str) and isinstance(v, float) for d in lp.top_logprobs for k, v in d.items())
        assert len(lp.text_offset) == n and all(isinstance(o, int) for o in lp.text_offset)
        assert lp.text_offset == sorted(lp.text_offset)
        if fake:  # a real tokenizer's tokens may split a character
            assert "".join(lp.tokens) == c.text
    if fake:
        assert comp.choices[0].finish_reason == "stop" and comp.choices[1].finish_reason == "length"
    u = comp.usage
    assert u is not None and u.prompt_tokens > 0 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.completion_tokens == sum(len(c.logprobs.tokens) for c in comp.choices)

    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=4, seed=3, logprobs=True, top_logprobs=2,
    )
    assert isinstance(chat, ChatCompletion), type(chat)
    assert chat.object == "chat.completion" and chat.id.startswith("chatcmpl-")
    assert len(chat.choices) == 1
    ch = chat.choices[0]
    assert ch.message.role == "assistant" and isinstance(ch.message.content, str)
    content = ch.logprobs.content
    assert 0 < len(content) <= 4 and len(content) == chat.usage.completion_tokens
    if fake:
        assert ch.finish_reason == "length" and len(content) == 4
    for t in content:
        assert isinstance(t.token, str) and isinstance(t.logprob, float)
        assert t.bytes == list(t.token.encode("utf-8"))
        assert len(t.top_logprobs) == 2
        assert all(isinstance(a.token, str) and isinstance(a.logprob, float) for a in t.top_logprobs)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob

    errors = []
    try:
        client.completions.create(model=model, prompt="x", max_tokens=-1)
    except openai.BadRequestError as e:
        assert isinstance(e.body, dict) and e.body.get("message"), e.body
        errors.append(f"{type(e).__name__}:{e.status_code}:{e.body.get('param')}")
    try:
        client.completions.create(model="no-such-model", prompt="x")
    except openai.NotFoundError as e:
        errors.append(f"{type(e).__name__}:{e.status_code}:{e.body.get('param')}")

    top0 = comp.choices[0].logprobs.top_logprobs[0]
    print(json.dumps({
        "completion_texts": [c.text for c in comp.choices],
        "completion_top_tokens": sorted(top0),
        "chat_text": ch.message.content,
        "chat_tokens": [t.token for t in content],
        "chat_logprobs": [t.logprob for t in content],
        "errors": errors,
    }))


if __name__ == "__main__":
    main()
