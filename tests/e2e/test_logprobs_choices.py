"""End-to-end: logprobs, logit_bias, n and prompt lists through the official openai SDK against
`dspark serve --model demo --mode draft` (speculative draft mode on real SmolLM2 weights)."""

import math

USER = [{"role": "user", "content": "Name three colors."}]


def test_chat_logprobs_parsed_by_sdk(real_server):
    c = real_server.client()
    r = c.chat.completions.create(model="demo", messages=USER, max_tokens=8, logprobs=True, top_logprobs=4)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for e in lp:
        assert len(e.top_logprobs) == 4
        # greedy: the emitted token is the likeliest one
        assert e.token == e.top_logprobs[0].token and e.logprob == e.top_logprobs[0].logprob
        assert bytes(e.bytes).decode() == e.token
        assert -30 < e.logprob <= 0
    chunks = list(c.chat.completions.create(model="demo", messages=USER, max_tokens=8, logprobs=True,
                                            top_logprobs=4, stream=True))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    # the second request reuses the cached prompt prefix (a shorter prefill): equal up to rounding
    assert [e.token for e in streamed] == [e.token for e in lp]
    assert max(abs(a.logprob - b.logprob) for a, b in zip(streamed, lp)) < 1e-4


def test_completion_logprobs_and_prompt_list(real_server):
    c = real_server.client()
    r = c.completions.create(model="demo", prompt=["The capital of France is", "One, two,"], max_tokens=6,
                             logprobs=2, n=2)
    assert [ch.index for ch in r.choices] == [0, 1, 2, 3]
    assert r.choices[0].text == r.choices[1].text and r.choices[2].text == r.choices[3].text
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(math.isfinite(x) and x <= 0 for x in lp.token_logprobs)
    assert lp.text_offset[0] == 0 and len(lp.top_logprobs) == len(lp.tokens)
    lone = c.completions.create(model="demo", prompt="One, two,", max_tokens=6)
    assert lone.choices[0].text == r.choices[2].text
    assert r.usage.completion_tokens == sum(len(ch.logprobs.tokens) if ch.logprobs else 0 for ch in r.choices)


def test_seeded_n_and_logit_bias(real_server):
    c = real_server.client()
    r = c.chat.completions.create(model="demo", messages=USER, max_tokens=10, temperature=1.0, seed=7, n=2)
    for i, ch in enumerate(r.choices):
        lone = c.chat.completions.create(model="demo", messages=USER, max_tokens=10, temperature=1.0, seed=7 + i)
        assert lone.choices[0].message.content == ch.message.content
    forced = c.completions.create(model="demo", prompt="One, two,", max_tokens=3, logit_bias={"28": 100}, logprobs=0)
    toks = forced.choices[0].logprobs.tokens
    assert len(toks) == 3 and len(set(toks)) == 1
    try:
        c.completions.create(model="demo", prompt="x", max_tokens=1, logit_bias={"999999": 1})
        raise AssertionError("an unknown token id was accepted")
    except Exception as e:  # openai.BadRequestError
        assert getattr(e, "status_code", None) == 400
