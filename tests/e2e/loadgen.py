"""Concurrent streaming clients against a running `dspark serve`, for the load test
(tests/e2e/test_load.py, 16 clients) and the load bench (scripts/bench/load.py, 200).

Every client sends one streamed chat completion at the same moment and classifies how it
ended:
  ok        200, content deltas, a finish_reason, usage and `data: [DONE]`
  rejected  429 or 503 carrying a Retry-After header (the bounded queue said no)
  bad       anything else: another status, a 429/503 without Retry-After, a stream cut
            short, malformed SSE
  hung      no end within the per-request deadline
A sampler polls /metrics (queue depth) and the server's resident set (/proc/PID/status)
every 50 ms while the clients run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx

PROMPTS = [
    "Write one sentence about the sea.",
    "Name three prime numbers.",
    "What is the capital of Italy?",
    "Give me a haiku about autumn.",
    "Explain what a CPU cache is in one line.",
]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[i]


async def one_client(http: httpx.AsyncClient, base: str, headers: dict, i: int, max_tokens: int) -> dict:
    body = {
        "model": "demo",
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    r: dict = {"client": i}
    async with http.stream("POST", base + "/v1/chat/completions", json=body, headers=headers) as resp:
        r["status"] = resp.status_code
        if resp.status_code in (429, 503):
            await resp.aread()
            r["retry_after"] = resp.headers.get("retry-after")
            r["outcome"] = "rejected" if r["retry_after"] else "bad"
            try:
                err = json.loads(resp.content)["error"]
                r["error_code"] = err.get("code")
            except (ValueError, KeyError, TypeError):
                r["outcome"] = "bad"
            return r
        if resp.status_code != 200:
            await resp.aread()
            r["outcome"] = "bad"
            r["body"] = resp.text[:300]
            return r
        deltas, finish, usage, done = 0, None, None, False
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices", []):
                if ch.get("delta", {}).get("content"):
                    deltas += 1
                    r.setdefault("ttft_s", time.monotonic() - t0)
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
        r["total_s"] = time.monotonic() - t0
        r["finish_reason"] = finish
        r["completion_tokens"] = (usage or {}).get("completion_tokens", 0)
        ok = done and finish in ("stop", "length") and deltas > 0 and r["completion_tokens"] > 0
        r["outcome"] = "ok" if ok else "bad"
        return r


async def sampler(http: httpx.AsyncClient, base: str, headers: dict, pid: int | None, out: dict, stop: asyncio.Event):
    while not stop.is_set():
        try:
            m = (await http.get(base + "/metrics", headers=headers)).json()
            out["max_queue_depth"] = max(out["max_queue_depth"], m["engine"]["queued"])
            out["max_running"] = max(out["max_running"], m["engine"]["running"])
        except (httpx.HTTPError, ValueError, KeyError):
            out["metrics_errors"] += 1
        if pid:
            out["peak_rss_mb"] = max(out["peak_rss_mb"], rss_mb(pid))
        try:
            await asyncio.wait_for(stop.wait(), 0.05)
        except asyncio.TimeoutError:
            pass


async def run(base: str, clients: int, max_tokens: int, api_key: str | None = None,
              pid: int | None = None, deadline_s: float = 600.0) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    timeout = httpx.Timeout(deadline_s, connect=30.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        before = (await http.get(base + "/metrics", headers=headers)).json()
        samples = {"max_queue_depth": 0, "max_running": 0, "metrics_errors": 0,
                   "peak_rss_mb": rss_mb(pid) if pid else 0.0}
        idle_rss = samples["peak_rss_mb"]
        stop = asyncio.Event()
        watch = asyncio.create_task(sampler(http, base, headers, pid, samples, stop))
        t0 = time.monotonic()

        async def guarded(i):
            try:
                return await asyncio.wait_for(one_client(http, base, headers, i, max_tokens), deadline_s)
            except asyncio.TimeoutError:
                return {"client": i, "outcome": "hung"}
            except (httpx.HTTPError, ValueError) as e:
                return {"client": i, "outcome": "bad", "error": repr(e)}

        results = await asyncio.gather(*(guarded(i) for i in range(clients)))
        wall = time.monotonic() - t0
        stop.set()
        await watch
        after = (await http.get(base + "/metrics", headers=headers)).json()
    ok = [r for r in results if r["outcome"] == "ok"]
    ttft = [r["ttft_s"] for r in ok if "ttft_s" in r]
    per_stream = [r["completion_tokens"] / r["total_s"] for r in ok if r.get("total_s")]
    tokens = sum(r["completion_tokens"] for r in ok)
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    jobs = {k: after["engine"][k] - before["engine"][k] for k in ("completed", "rejected", "cancelled", "failed")}
    return {
        "clients": clients,
        "max_tokens": max_tokens,
        "outcomes": outcomes,
        "engine_jobs_delta": jobs,
        "wall_s": round(wall, 2),
        "ttft_p50_s": percentile(ttft, 0.5),
        "ttft_p99_s": percentile(ttft, 0.99),
        "stream_tok_s_p50": percentile(per_stream, 0.5),
        "aggregate_tok_s": tokens / wall if wall > 0 else None,
        "completion_tokens": tokens,
        "max_queue_depth": samples["max_queue_depth"],
        "max_running": samples["max_running"],
        "metrics_errors": samples["metrics_errors"],
        "idle_rss_mb": round(idle_rss, 1),
        "peak_rss_mb": round(samples["peak_rss_mb"], 1),
        "results": results,
        "mean_ttft_s": statistics.mean(ttft) if ttft else None,
    }
