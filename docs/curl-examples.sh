#!/usr/bin/env bash
# curl examples for `dspark serve` (quoted by the README; run by the server's curl_examples
# test). Set DSPARK_URL (default http://127.0.0.1:8080) and DSPARK_API_KEY if auth is on.
set -euo pipefail
URL="${DSPARK_URL:-http://127.0.0.1:8080}"
AUTH=()
if [ -n "${DSPARK_API_KEY:-}" ]; then AUTH=(-H "Authorization: Bearer $DSPARK_API_KEY"); fi

# Health (never needs a key)
curl -fsS "$URL/health"; echo

# The served model
curl -fsS "${AUTH[@]}" "$URL/v1/models"; echo

# Chat, whole response (usage and x_dspark stats included)
curl -fsS "${AUTH[@]}" "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "messages": [{"role": "user", "content": "Say hello in French."}],
  "max_tokens": 32
}'; echo

# Chat, streamed (SSE; ends with data: [DONE])
curl -fsSN "${AUTH[@]}" "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "messages": [{"role": "user", "content": "Count to five."}],
  "max_tokens": 32, "stream": true, "stream_options": {"include_usage": true}
}'

# Raw-text completion with a stop string and a seed
curl -fsS "${AUTH[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' -d '{
  "prompt": "The capital of France is", "max_tokens": 16, "stop": ["\n"],
  "temperature": 0.7, "seed": 42
}'; echo

# Metrics as Prometheus text (JSON without ?format=prometheus)
curl -fsS "${AUTH[@]}" "$URL/metrics?format=prometheus" | head -n 6
