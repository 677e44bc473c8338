#!/usr/bin/env python3
"""Load bench: N concurrent streaming clients (default 200) against `dspark serve --model demo`.

Starts the server on a loopback port with a bounded queue, fires every client at once through
tests/e2e/loadgen.py (the driver of the CI load test), and writes outcomes (ok / rejected with
Retry-After / bad / hung), p50/p99 time to first token, per-stream and aggregate tok/s, the
largest queue depth seen and the server's idle and peak resident set as JSON.

  cargo build --release -p dspark-cli
  .venv-e2e/bin/python scripts/bench/load.py --clients 200 --queue 64 --out bench-results/load-200.json
"""
import argparse
import asyncio
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import loadgen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dspark", default=str(ROOT / "target" / "release" / "dspark"))
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--queue", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `dspark serve` argument")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "load.json"))
    a = ap.parse_args()
    cmd = [a.dspark, "serve", "--port", "0", "--model", "demo", "--queue", str(a.queue), *a.serve_arg]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                sys.exit("dspark serve exited before listening")
            if line.startswith("listening on "):
                base = line.split()[-1]
                break
        if base is None:
            sys.exit("dspark serve did not start in time")
        warm = asyncio.run(loadgen.run(base, 1, a.max_tokens, pid=proc.pid))
        r = asyncio.run(loadgen.run(base, a.clients, a.max_tokens, pid=proc.pid))
        after = asyncio.run(loadgen.run(base, 1, a.max_tokens))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    r["command"] = " ".join(cmd)
    r["warm_rss_mb"] = warm["peak_rss_mb"]
    r["serves_after"] = after["outcomes"] == {"ok": 1}
    summary = {k: v for k, v in r.items() if k != "results"}
    print(json.dumps(summary, indent=1))
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps(r, indent=1) + "\n")
    bad = r["outcomes"].get("bad", 0) + r["outcomes"].get("hung", 0)
    sys.exit(1 if bad or not r["serves_after"] or r["max_queue_depth"] > a.queue else 0)


if __name__ == "__main__":
    main()
