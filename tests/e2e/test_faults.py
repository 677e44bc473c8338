"""Faults against real `dspark serve --model demo` processes with prefix-cache spills on:

* a disk that fills up: the server runs under `ulimit -f` (files it writes are cut at 64 KiB,
  far below one spilled slot, with SIGXFSZ ignored so the write fails with EFBIG as on a full
  disk): every request still succeeds with the uncached output, /metrics counts the failed
  spills, and no partial file is left in the spill directory;
* `kill -9` while the server spills: during a spill-heavy run the test watches the spill
  directory and kills the server the moment a spill's `.tmp` exists (5 rounds, seeded
  delays), then restarts it on the same directory; it starts, loads nothing corrupt, removes
  the interrupted writes, and answers with the same greedy tokens as before the crashes.
"""

import json
import os
import pathlib
import random
import signal
import subprocess
import threading
import time
import urllib.request

from conftest import BIN

PROMPTS = [f"Write a short line about the number {n} and why it is interesting." for n in range(12)]


class Proc:
    def __init__(self, args, wrap=None):
        cmd = [BIN, "serve", "--port", "0", "--model", "demo", *args]
        if wrap:
            cmd = ["bash", "-c", wrap + ' exec "$@"', "bash", *cmd]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("dspark serve exited:\n" + "".join(self.log))
            self.log.append(line)
            if line.startswith("listening on "):
                self.base = line.split()[-1]
                threading.Thread(target=self._drain, daemon=True).start()
                return
        raise RuntimeError("dspark serve did not start")

    def _drain(self):
        for line in self.p.stdout:
            self.log.append(line)

    def chat(self, prompt, timeout=120):
        body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": 12, "temperature": 0}).encode()
        req = urllib.request.Request(self.base + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def metrics(self):
        with urllib.request.urlopen(self.base + "/metrics", timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def files(d):
    return sorted(p for p in pathlib.Path(d).rglob("*") if p.is_file())


def spill_args(d):
    # 1 MB of RAM for the cache: every finished request's state spills to disk
    return ["--prefix-cache-slots", "16", "--prefix-cache-ram-mb", "1", "--prefix-cache-dir", str(d)]


def test_full_disk_during_spills_keeps_serving(tmp_path):
    ref = Proc(["--no-prefix-cache"])
    try:
        want = [ref.chat(p)["choices"][0]["message"]["content"] for p in PROMPTS[:4]]
    finally:
        ref.stop()
    d = tmp_path / "spill"
    s = Proc(spill_args(d), wrap="trap '' XFSZ; ulimit -f 64;")
    try:
        for p, w in zip(PROMPTS[:4] * 2, want * 2):
            r = s.chat(p)
            assert r["choices"][0]["message"]["content"] == w
        pc = s.metrics()["prefix_cache"]
        assert pc["spill_errors"] >= 1, pc
        assert pc["spills"] == 0, pc
    finally:
        s.stop()
    leftovers = files(d) if d.exists() else []
    assert leftovers == [], leftovers


def test_kill_9_during_spills_then_restart(tmp_path):
    d = tmp_path / "spill"
    s = Proc(spill_args(d))
    want = {p: s.chat(p)["choices"][0]["message"]["content"] for p in PROMPTS[:3]}
    rng = random.Random(20261130)
    stale = corrupt = caught = 0
    for round_ in range(5):
        stop = threading.Event()

        def hammer():
            i = 0
            while not stop.is_set():
                try:
                    s.chat(PROMPTS[(i + round_) % len(PROMPTS)], timeout=30)
                except Exception:
                    return
                i += 1

        t = threading.Thread(target=hammer, daemon=True)
        t.start()
        # kill the moment a spill is being written (its `.tmp` exists), after a seeded delay;
        # if no write is caught within 10 s, kill anyway
        time.sleep(rng.uniform(0.2, 1.0))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(f.name.endswith(".tmp") for f in d.rglob("slot-*")):
                caught += 1
                break
        os.kill(s.p.pid, signal.SIGKILL)
        s.p.wait(timeout=30)
        stop.set()
        t.join(timeout=60)
        s = Proc(spill_args(d))
        # the restart removed interrupted writes and serves the same tokens
        assert not [f for f in files(d) if f.suffix == ".tmp"], files(d)
        for p, w in want.items():
            assert s.chat(p)["choices"][0]["message"]["content"] == w, (round_, p)
        pc = s.metrics()["prefix_cache"]
        stale += pc["stale_files_removed"]
        corrupt += pc["corrupt_files"]
    print(f"5 kills, {caught} inside a spill write: {stale} interrupted spills removed, "
          f"{corrupt} corrupt files ignored")
    s.stop()
    # the kills did land inside spills, and every such leftover was cleaned up at restart
    assert caught >= 1 and stale >= 1, (caught, stale)
