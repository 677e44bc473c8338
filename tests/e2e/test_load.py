"""Load: 16 concurrent streaming clients against `dspark serve --model demo` with a queue of 8.

Every request must end in a full streamed response or a 429/503 with Retry-After; none may
hang or be lost (the engine's completed/rejected counters move by exactly what the clients
saw); the queue never holds more than its bound; the server's resident set grows by less than
RSS_GROWTH_MB over its idle size; p50/p99 time to first token and tok/s are reported. The
same driver (loadgen.py) runs 200 clients in scripts/bench/load.py.
"""

import asyncio
import json

import pytest

import loadgen
from conftest import Server

CLIENTS = 16
QUEUE = 8
MAX_TOKENS = 16
# 9 live generations (1 running + 8 queued) each hold a KV cache and a request: a few MB each
RSS_GROWTH_MB = 256


@pytest.fixture(scope="module")
def load_server():
    s = Server(["--model", "demo", "--queue", str(QUEUE)])
    yield s
    s.stop()


def test_sixteen_streaming_clients(load_server):
    # one request first, so the idle RSS includes what a first generation allocates
    warm = asyncio.run(loadgen.run(load_server.base, 1, MAX_TOKENS, pid=load_server.proc.pid))
    assert warm["outcomes"] == {"ok": 1}, warm
    r = asyncio.run(loadgen.run(load_server.base, CLIENTS, MAX_TOKENS, pid=load_server.proc.pid))
    summary = {k: v for k, v in r.items() if k != "results"}
    print(json.dumps(summary, indent=1))
    bad = [x for x in r["results"] if x["outcome"] not in ("ok", "rejected")]
    assert not bad, bad
    ok, rejected = r["outcomes"].get("ok", 0), r["outcomes"].get("rejected", 0)
    assert ok + rejected == CLIENTS
    # at least the running job and a full queue were admitted
    assert ok >= QUEUE + 1, summary
    for x in r["results"]:
        if x["outcome"] == "rejected":
            assert x["retry_after"] and int(x["retry_after"]) >= 1, x
            assert x["error_code"] == "queue_full", x
    # nothing lost: the engine counted exactly what the clients saw
    assert r["engine_jobs_delta"]["completed"] == ok, summary
    assert r["engine_jobs_delta"]["rejected"] == rejected, summary
    assert r["engine_jobs_delta"]["failed"] == 0, summary
    assert r["max_queue_depth"] <= QUEUE, summary
    assert r["max_running"] <= 1, summary
    assert r["peak_rss_mb"] - warm["peak_rss_mb"] < RSS_GROWTH_MB, summary
    assert r["ttft_p50_s"] is not None and r["ttft_p99_s"] >= r["ttft_p50_s"]
    # and the server still serves
    again = asyncio.run(loadgen.run(load_server.base, 1, MAX_TOKENS))
    assert again["outcomes"] == {"ok": 1}, again
