"""Fixtures for the end-to-end suite: real `dspark serve` processes on loopback ports.

`real_server` serves the real demo model (SmolLM2-135M GGUF) in draft mode with an API key
and a queue of one; `scripted_server` serves the hidden scripted engine (no model) so that
tool-call and reasoning parsing can be driven through the official SDK deterministically.
"""

import json
import os
import pathlib
import subprocess
import time
import urllib.request

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("DSPARK_BIN", str(ROOT / "target" / "debug" / "dspark"))
API_KEY = "e2e-secret"
START_TIMEOUT_S = 300


class Server:
    def __init__(self, args, api_key=None):
        env = dict(os.environ)
        env.pop("DSPARK_API_KEY", None)
        cmd = [BIN, "serve", "--port", "0", *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.api_key = api_key
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.banner = []
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("dspark serve exited:\n" + "".join(self.banner))
            self.banner.append(line)
            if line.startswith("listening on "):
                self.base = line.split()[-1]
                return
        raise RuntimeError("dspark serve did not start in time")

    def client(self, **kw):
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120)
        return openai.OpenAI(base_url=self.base + "/v1", api_key=self.api_key or "unused", **kw)

    def get_json(self, path):
        req = urllib.request.Request(self.base + path)
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def real_server():
    s = Server(["--model", "demo", "--mode", "draft", "--queue", "1"], api_key=API_KEY)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def scripted_server(tmp_path_factory):
    script = {
        "rules": [
            {"if_contains": '"role":"tool"', "reply": "It is 22 C and sunny in Paris."},
            {"if_contains": "weather", "reply": "Let me look that up.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
            {"if_contains": "think", "reply": "<think>\nThe user wants a number.\n</think>\n\n42"},
            {"reply": "ok"},
        ],
        "round_chars": 3,
    }
    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps(script))
    s = Server(["--scripted", str(path)])
    yield s
    s.stop()
