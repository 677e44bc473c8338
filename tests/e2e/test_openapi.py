"""/openapi.json and a schemathesis run against `dspark serve` (scripted engine, API key on).

schemathesis (pinned in scripts/e2e-venv.sh) reads the served description and sends generated
requests to every operation: valid bodies, and bodies that break the schema. The run passes
only if no response is a 5xx, every status code and content type is one the description
declares, every JSON body conforms to its declared schema (streamed events too), and every body
the schema allows is accepted. Bodies the schema forbids are sent as well (negative mode) and
must not cause a 5xx either. Seeded and bounded to stay well under a
minute in CI.
"""

import json
import os
import pathlib
import re
import subprocess
import urllib.request

import pytest

from conftest import API_KEY, ROOT, Server

ST = ROOT / ".venv-e2e" / "bin" / "schemathesis"
CHECKS = ",".join([
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "positive_data_acceptance",
])
# `positive_data_acceptance`: every body the schema allows must get a 2xx. Request schemas
# list a subset of what the validators accept where JSON Schema cannot state a rule (an
# Anthropic conversation must end with a user turn, so `/v1/messages` lists user turns only;
# a named `tool_choice` must name one of `tools`, which the schema cannot tie together).
# Not `negative_data_rejection`: the server accepts a superset of the schema by design
# (unknown fields are ignored, as OpenAI's are, and integers beyond int64 saturate).
MAX_EXAMPLES = int(os.environ.get("DSPARK_OPENAPI_EXAMPLES", "25"))
SEED = 20261201


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps({"rules": [{"reply": "ok"}], "round_chars": 2,
                                # any max_tokens the schema allows fits
                                "context_len": 1 << 40}))
    s = Server(["--scripted", str(path)], api_key=API_KEY)
    yield s
    s.stop()


def test_openapi_json_is_served_without_a_key(server):
    with urllib.request.urlopen(server.base + "/openapi.json", timeout=30) as r:
        doc = json.loads(r.read())
    assert doc["openapi"].startswith("3.")
    for p in ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
              "/v1/messages/count_tokens", "/v1/models", "/v1/models/{id}", "/health", "/metrics"]:
        assert p in doc["paths"], p
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    # the key is still needed everywhere else
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.base + "/v1/models", timeout=30)
    assert e.value.code == 401


def test_schemathesis_finds_no_failure(server, tmp_path):
    report = tmp_path / "report.ndjson"
    cmd = [
        str(ST), "run", server.base + "/openapi.json",
        "--checks", CHECKS,
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        "--generation-deterministic",
        "--header", f"Authorization: Bearer {API_KEY}",
        "--max-response-time", "20",
        "--report", "ndjson", "--report-ndjson-path", str(report),
        "--no-color",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    print(out[-6000:])
    assert r.returncode == 0, out[-6000:]
    # it really tested the operations, with many cases (deterministic mode: the same cases
    # every run; 756 over 6 operations before the Responses and Messages routes were described)
    tested = re.search(r"(\d+) generated", out)
    assert tested and int(tested.group(1)) >= 300, out[-2000:]
    ops = re.search(r"Tested:\s+(\d+)", out)
    assert ops and int(ops.group(1)) >= 9, out[-2000:]
