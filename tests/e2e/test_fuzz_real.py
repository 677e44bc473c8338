"""10,000 generated hostile requests against `dspark serve --model demo` (the real SmolLM2
model behind the real HTTP stack), fixed seed.

Requests mutate valid chat and completion bodies field by field (wrong types, huge and
negative numbers, NaN-like literals, invalid UTF-8 and lone surrogates, deep nesting, odd
roles and content parts, truncated JSON, random bytes), and vary the method, path, query,
content type and credentials. A mutated body that is still valid generates at most 3 tokens.
No response may be a 5xx, the connection may never be dropped without a response, every
error body must be OpenAI's error shape, the engine must record no failed job, and a good
request must still succeed afterwards.
"""

import http.client
import json
import random
import urllib.parse

from conftest import Server

CASES = 10_000
SEED = 20261130
KEY = "fuzz-key"

WEIRD = [None, -1, 0, 1e308, -1e308, "x", "", [], {}, [[[]]], True, False, 10**30, -(10**30),
         "\udcff", "\u0000", "😀" * 50, 3.5, "NaN", {"a": {"b": {"c": []}}}, [None] * 20, "9" * 400]
ROLES = ["user", "system", "assistant", "tool", "developer", "", "USER", None, 7, "\x00"]


def weird(rng, depth=0):
    r = rng.random()
    if depth < 4 and r < 0.12:
        return [weird(rng, depth + 1) for _ in range(rng.randrange(4))]
    if depth < 4 and r < 0.24:
        return {rng.choice(["role", "content", "type", "text", "x"]): weird(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    return rng.choice(WEIRD)


def good_chat(rng):
    body = {"model": "demo", "messages": [{"role": "user", "content": rng.choice(["hi", "2+2?", "Name a color."])}],
            "max_tokens": rng.randrange(1, 4)}
    for k, v in [("temperature", rng.choice([0, 0.7, 1.5])), ("top_p", 0.9), ("top_k", 5), ("seed", 3),
                 ("stop", ["\n"]), ("stream", rng.random() < 0.5), ("presence_penalty", 0.1),
                 ("stream_options", {"include_usage": True}), ("n", 1), ("user", "u")]:
        if rng.random() < 0.3:
            body[k] = v
    return body


def good_completion(rng):
    return {"model": "demo", "prompt": rng.choice(["Once", "1, 2, 3,", ["a", "b"]]), "max_tokens": rng.randrange(1, 4)}


def mutate(rng, body):
    body = json.loads(json.dumps(body))
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(7)
        if op == 0:  # any field gets a weird value (max_tokens: never a mid-size valid count)
            k = rng.choice(list(body) + ["tools", "tool_choice", "response_format", "logit_bias", "extra"])
            body[k] = weird(rng)
        elif op == 1 and isinstance(body.get("messages"), list) and body["messages"]:
            m = body["messages"][0]
            if isinstance(m, dict):
                m[rng.choice(["role", "content", "name", "tool_calls", "tool_call_id"])] = rng.choice(
                    [weird(rng), rng.choice(ROLES), [{"type": "text", "text": "hi"}, {"type": "image_url"}]])
        elif op == 2:
            body["messages"] = [{"role": rng.choice(ROLES), "content": weird(rng)} for _ in range(rng.randrange(0, 6))]
        elif op == 3:
            body.pop(rng.choice(list(body)), None) if body else None
        elif op == 4:
            body["max_tokens"] = rng.choice([-5, 0, 2**31, 10**12, 1.5, "3", None, 999_999_999])
        elif op == 5:
            body["stop"] = rng.choice([["x"] * 50, "", [""], [None], "\n" * 1000, weird(rng)])
        else:
            body[rng.choice(["temperature", "top_p", "top_k", "seed", "frequency_penalty"])] = rng.choice(
                [-1, 1e9, "hot", None, [], float("inf") if rng.random() < 0.5 else -0.0])
    return body


def encode(rng, body):
    r = rng.random()
    if r < 0.05:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    s = json.dumps(body, allow_nan=True, ensure_ascii=rng.random() < 0.5)
    raw = s.encode("utf-8", "surrogatepass")
    if r < 0.12:
        return raw[: rng.randrange(max(1, len(raw)))]
    if r < 0.15:
        return b'{"messages":' + b"[" * 3000 + b"]" * 3000 + b"}"
    if r < 0.18:
        return raw.replace(b"hi", b"\xff\xfe", 1)
    return raw


class Conn:
    def __init__(self, base):
        u = urllib.parse.urlparse(base)
        self.host, self.port = u.hostname, u.port
        self.c = None

    def send(self, method, path, body, headers):
        for attempt in range(2):
            if self.c is None:
                self.c = http.client.HTTPConnection(self.host, self.port, timeout=120)
            try:
                self.c.request(method, path, body=body, headers=headers)
                r = self.c.getresponse()
                data = r.read()
                if r.getheader("connection", "").lower() == "close":
                    self.c.close()
                    self.c = None
                return r.status, data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # a server may close an idle keep-alive connection; a dropped request is retried once
                self.c.close()
                self.c = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def test_ten_thousand_hostile_requests_on_the_real_model():
    # a body that omits max_tokens (or sets it to null) gets 3 tokens, not a long generation
    s = Server(["--model", "demo", "--default-max-tokens", "3"], api_key=KEY)
    try:
        rng = random.Random(SEED)
        conn = Conn(s.base)
        statuses = {}
        for case in range(CASES):
            gen = good_chat if rng.random() < 0.7 else good_completion
            body = gen(rng)
            if rng.random() < 0.85:
                body = mutate(rng, body)
            path = "/v1/chat/completions" if gen is good_chat else "/v1/completions"
            if rng.random() < 0.1:
                path = rng.choice(["/v1/chat/completions?x=%ff", "/v1/completions/../models", "/v1//chat/completions",
                                   "/v1/chat/completions/", "/v1/models/..%2f..%2fetc%2fpasswd", "/%00"])
            method = "POST" if rng.random() < 0.92 else rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
            headers = {"Content-Type": rng.choice(["application/json"] * 8 + ["text/plain", "application/x-www-form-urlencoded", ""])}
            auth = rng.random()
            if auth < 0.9:
                headers["Authorization"] = "Bearer " + KEY
            elif auth < 0.95:
                headers["Authorization"] = rng.choice(["Bearer wrong", "Bearer ", "Basic Zm9vOmJhcg==", "Bearer " + KEY + "x"])
            st, data = conn.send(method, path, encode(rng, body), headers)
            statuses[st] = statuses.get(st, 0) + 1
            assert st < 500, (case, method, path, st, data[:300])
            if st >= 400 and method != "HEAD" and data:
                err = json.loads(data)["error"]
                assert isinstance(err["message"], str) and err["message"], (case, data[:300])
                assert {"message", "type", "param", "code"} <= set(err), (case, data[:300])
        print(f"statuses over {CASES} hostile requests: {dict(sorted(statuses.items()))}")
        assert statuses.get(200, 0) > 300, statuses
        assert statuses.get(400, 0) > CASES // 4, statuses
        assert statuses.get(401, 0) > 100, statuses
        engine = s.get_json("/metrics")["engine"]
        assert engine["failed"] == 0, engine
        r = s.client().chat.completions.create(model="demo", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert r.choices[0].message.content
    finally:
        s.stop()
