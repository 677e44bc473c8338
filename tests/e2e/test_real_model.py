"""End-to-end: the official openai SDK against `dspark serve --model demo --mode draft` on a
real loopback port (real SmolLM2 weights, speculative draft mode)."""

import http.client
import json
import random
import threading
import time
import urllib.parse

import openai
import pytest

from conftest import API_KEY

USER = [{"role": "user", "content": "Name three colors."}]


def test_chat_non_stream(real_server):
    r = real_server.client().chat.completions.create(model="demo", messages=USER, max_tokens=16)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    x = r.model_extra["x_dspark"]
    assert x["mode"] == "draft"
    for k in ("accept_len", "tokens_per_sec", "target_forwards", "draft_ms", "verify_ms"):
        assert k in x
    assert x["accept_len"] >= 1.0


def test_usage_non_stream_and_stream(real_server):
    c = real_server.client()
    r = c.chat.completions.create(model="demo", messages=USER, max_tokens=8)
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 8
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0
    chunks = list(c.chat.completions.create(model="demo", messages=USER, max_tokens=8, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens == u.prompt_tokens
    assert chunks[-1].usage.completion_tokens == u.completion_tokens
    # the identical prompt was just served: the prefix cache reuses all but its last token
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == u.prompt_tokens - 1


def test_stream_role_first_then_live_deltas_matching_non_stream(real_server):
    c = real_server.client()
    whole = c.chat.completions.create(model="demo", messages=USER, max_tokens=24).choices[0].message.content
    chunks = list(c.chat.completions.create(model="demo", messages=USER, max_tokens=24, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == whole
    assert sum(1 for ch in chunks if ch.choices[0].delta.content) >= 2
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert "x_dspark" in chunks[-1].model_extra


def test_completions_endpoint(real_server):
    r = real_server.client().completions.create(model="demo", prompt="The capital of France is", max_tokens=8)
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert r.usage.completion_tokens <= 8


def test_stop_string_cuts_before_the_stop(real_server):
    c = real_server.client()
    full = c.chat.completions.create(model="demo", messages=USER, max_tokens=24).choices[0].message.content
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    r = c.chat.completions.create(model="demo", messages=USER, max_tokens=24, stop=[stop])
    assert r.choices[0].message.content == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seed_reproducibility(real_server):
    c = real_server.client()
    kw = dict(model="demo", messages=[{"role": "user", "content": "Tell me a short story."}],
              max_tokens=16, temperature=1.0, top_p=0.95)
    a = c.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = c.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b
    others = {c.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds never changed the sample"


def test_tools_param_accepted_by_real_model(real_server):
    # SmolLM2's template ignores tools, so this proves acceptance, not parsing (see scripted tests)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    r = real_server.client().chat.completions.create(model="demo", messages=USER, tools=tools, max_tokens=8)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_error_400_wrong_type_names_param(real_server):
    with pytest.raises(openai.BadRequestError) as e:
        real_server.client().chat.completions.create(model="demo", messages=USER, temperature="hot")
    assert e.value.status_code == 400
    assert e.value.body["param"] == "temperature"


def test_error_400_context_length_exceeded(real_server):
    with pytest.raises(openai.BadRequestError) as e:
        real_server.client().chat.completions.create(model="demo", messages=USER, max_tokens=10_000_000)
    assert e.value.body["code"] == "context_length_exceeded"


def test_error_401_wrong_key(real_server):
    c = openai.OpenAI(base_url=real_server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.models.list()
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="demo", messages=USER, max_tokens=2)


def test_error_404_unknown_model_and_route(real_server):
    c = real_server.client()
    assert [m.id for m in c.models.list().data] == [c.models.list().data[0].id]
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("no-such-model")
    with pytest.raises(openai.NotFoundError):
        c.get("/nope", cast_to=object)


def _wait(pred, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)  # bounded poll of the server's own counters
    raise AssertionError("condition not reached")


def test_error_429_when_queue_full_then_disconnect_cancels(real_server):
    c = real_server.client()
    before = real_server.get_json("/metrics")["engine"]
    long = [{"role": "user", "content": "Count from 1 to 500, separated by commas."}]
    # A: running (first content delta seen), B: queued (queue of one), C: rejected
    stream = c.chat.completions.create(model="demo", messages=long, max_tokens=400, stream=True)
    it = iter(stream)
    seen = 0
    for ch in it:
        if ch.choices and ch.choices[0].delta.content:
            seen += 1
            if seen == 3:
                break
    result = {}
    t = threading.Thread(target=lambda: result.update(r=c.chat.completions.create(model="demo", messages=USER, max_tokens=4)))
    t.start()
    _wait(lambda: real_server.get_json("/metrics")["engine"]["queued"] == 1)
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="demo", messages=USER, max_tokens=4)
    assert e.value.response.headers["retry-after"] == "1"
    # the client of A goes away mid-stream
    stream.close()
    t.join(timeout=120)
    assert result["r"].choices[0].message.content is not None  # the server kept serving
    after = real_server.get_json("/metrics")["engine"]
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["rejected"] == before["rejected"] + 1
    # A stopped long before its 400 tokens: only a few rounds ran after the disconnect
    assert after["generated_tokens"] - before["generated_tokens"] < 150
    r = c.chat.completions.create(model="demo", messages=USER, max_tokens=4)
    assert r.choices[0].message.content


def _raw(base, method, path, body, headers):
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        try:
            conn.request(method, path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            # the server answered (e.g. 413 on an oversized body) and closed before the whole
            # body went out; its answer is already in our receive buffer: read it
            pass
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def test_hundreds_of_malformed_requests_on_real_server(real_server):
    rng = random.Random(7)
    auth = {"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"}
    good = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    fields = ["messages", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream", "tools", "tool_choice", "prompt"]
    weird = [None, -1, 1e308, "x", [], {}, [[[]]], True, 10**30, "\udcff"]
    statuses = {}
    for i in range(300):
        kind = i % 5
        if kind == 0:
            b = dict(good)
            b[rng.choice(fields)] = rng.choice(weird)
            body = json.dumps(b, allow_nan=True).encode("utf-8", "surrogatepass")
        elif kind == 1:
            s = json.dumps(good).encode()
            body = s[: rng.randrange(len(s))]
        elif kind == 2:
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        elif kind == 3:
            body = b'{"messages":' + b"[" * 5000 + b"]" * 5000 + b"}"
        else:
            body = b'{"messages":[{"role":"user","content":"\xff\xfe"}]}'
        path = rng.choice(["/v1/chat/completions", "/v1/completions", "/v1/chat/completions?x=1"])
        st = _raw(real_server.base, "POST", path, body, auth)
        statuses[st] = statuses.get(st, 0) + 1
        assert st < 500, (i, st, body[:200])
    assert _raw(real_server.base, "POST", "/v1/chat/completions", b"[" * (11 * 1024 * 1024), auth) == 413
    r = real_server.client().chat.completions.create(model="demo", messages=USER, max_tokens=4)
    assert r.choices[0].message.content
    assert statuses.get(400, 0) > 100, statuses
