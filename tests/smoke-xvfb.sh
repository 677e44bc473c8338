#!/usr/bin/env bash
# Smoke test of the desktop app (src-tauri, `dspark-app`) under Xvfb: start it with the demo
# model, check that its in-process endpoint answers (health, models, a chat, the embedded UI),
# type a chat into the window (IPC path), screenshot it, then use the tray menu (XEmbed icon
# hosted by `trayer`): Stop Server, Start Server, Quit,
# expecting exit code 0.
#
# Needs: xvfb xauth xdotool trayer imagemagick curl, and a built app (target/debug/dspark-app,
# from `cargo test --workspace --no-run` or `cargo build -p dspark-app`).
# Env: DSPARK_APP_BIN (default target/debug/dspark-app), DSPARK_E2E_ARTIFACTS (screenshots).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DISPLAY:-}" ]; then
    exec xvfb-run -a -s "-screen 0 1280x860x24" "$0" "$@"
fi
BIN=${DSPARK_APP_BIN:-target/debug/dspark-app}
OUT=${DSPARK_E2E_ARTIFACTS:-target/e2e-artifacts}
mkdir -p "$OUT"
t0=$(date +%s%N)
elapsed() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
say() { echo "smoke [$(elapsed)s] $*"; }
# GET url, expect pattern (read the whole body first: `curl | grep -q` trips pipefail)
has() { local body; body=$(curl -fsS "$1") && grep -q -- "$2" <<<"$body"; }

tmp=$(mktemp -d)
app=""
tray=""
cleanup() {
    [ -n "$app" ] && kill "$app" 2>/dev/null || true
    [ -n "$tray" ] && kill "$tray" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# settings for this run only: the demo model in draft mode on any free loopback port
printf 'model = "demo"\nmode = "draft"\nport = 0\n' > "$tmp/config.toml"
export DSPARK_CONFIG="$tmp/config.toml"

trayer --edge top --align right --widthtype request --height 28 --SetDockType true \
    --transparent false --expand true >/dev/null 2>&1 &
tray=$!
sleep 0.5

"$BIN" > "$tmp/app.out" 2> "$tmp/app.err" &
app=$!
say "started $BIN (pid $app)"

url=""
for _ in $(seq 1 600); do
    url=$(grep -o 'listening on http://[0-9.:]*' "$tmp/app.out" | head -1 | cut -d' ' -f3 || true)
    [ -n "$url" ] && break
    kill -0 "$app" 2>/dev/null || { cat "$tmp/app.out" "$tmp/app.err"; echo "smoke: app exited early"; exit 1; }
    sleep 0.5
done
[ -n "$url" ] || { cat "$tmp/app.err"; echo "smoke: no endpoint after 300 s"; exit 1; }
say "in-process endpoint at $url"

has "$url/health" '"status":"ok"'
has "$url/v1/models" '"id":"demo"'
reply=$(curl -fsS "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Say hello."}],"max_tokens":12}')
grep -q '"x_dspark"' <<<"$reply" || { echo "smoke: bad reply: $reply"; exit 1; }
has "$url/" '<title>dspark</title>'
has "$url/api/live" '"histogram"'
say "endpoint answers: health, models, chat (x_dspark), UI, live stats"

# the app starts the engine as `dspark serve` does, prefix cache on: a second turn of the
# same conversation reuses the first turn's prompt from the cache
py() { python3 -c "import json, sys; $1" "${@:2}"; }
first=$(py 'print(json.loads(sys.argv[1])["choices"][0]["message"]["content"])' "$reply")
body=$(py 'print(json.dumps({"messages": [{"role": "user", "content": "Say hello."},
    {"role": "assistant", "content": sys.argv[1]}, {"role": "user", "content": "And now goodbye."}],
    "max_tokens": 8}))' "$first")
turn2=$(curl -fsS "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
cached=$(py 'print(json.loads(sys.argv[1])["usage"]["prompt_tokens_details"]["cached_tokens"])' "$turn2")
[ "${cached:-0}" -gt 0 ] || { echo "smoke: second turn reused no cached tokens: $turn2"; exit 1; }
say "second turn: $cached prompt tokens from the prefix cache"

# the window is up and rendered the UI
win=""
for _ in $(seq 1 40); do
    win=$(xdotool search --onlyvisible --name '^dspark$' 2>/dev/null | head -1 || true)
    [ -n "$win" ] && break
    sleep 0.25
done
[ -n "$win" ] || { echo "smoke: no dspark window"; exit 1; }
sleep 2
import -window root "$OUT/app-window.png"
say "window $win mapped; screenshot $OUT/app-window.png"
# the Models tab (registry and drafter resolution over IPC), for the artefacts
xdotool mousemove --window "$win" 111 58 click 1
sleep 1.5
import -window root "$OUT/app-models.png"
xdotool mousemove --window "$win" 40 58 click 1
sleep 0.5

# a chat typed into the window goes over IPC (Tauri command + channel) into the same router:
# the server's request count rises, and the reply streams into the window
xdotool mousemove --window "$win" 300 715 click 1
sleep 0.3
xdotool type --delay 20 "Write a haiku about the sea."
xdotool key Return
n=0
for _ in $(seq 1 480); do
    n=$(curl -fsS "$url/metrics" | grep -o '"requests":[0-9]*' | cut -d: -f2 || true)
    [ "${n:-0}" -ge 2 ] && break
    sleep 0.25
done
[ "${n:-0}" -ge 2 ] || { echo "smoke: the in-window chat did not finish"; exit 1; }
sleep 1
import -window root "$OUT/app-chat.png"
say "chat typed in the window finished over IPC; screenshot $OUT/app-chat.png"

# the tray icon (XEmbed fallback of appindicator, inside trayer): open its menu, then Quit
icon=""
for _ in $(seq 1 40); do
    icon=$(xdotool search --class 'tray-icon' 2>/dev/null | head -1 || true)
    [ -n "$icon" ] && break
    sleep 0.25
done
[ -n "$icon" ] || { echo "smoke: no tray icon"; exit 1; }
menu() {  # open the tray menu and pick the n-th item
    xdotool mousemove --window "$icon" 8 8 click 1
    sleep 1
    [ -n "${2:-}" ] && import -window root "$2"
    for _ in $(seq 1 "$1"); do xdotool key Down; done
    xdotool key Return
}
# Stop Server, then Start Server again (port 0: the listener comes back on a new free port)
menu 5
for _ in $(seq 1 20); do curl -fsS -m 1 "$url/health" >/dev/null 2>&1 || break; sleep 0.25; done
if curl -fsS -m 1 "$url/health" >/dev/null 2>&1; then echo "smoke: Stop Server left $url answering"; exit 1; fi
say "tray menu → Stop Server: the endpoint is closed"
sleep 0.5
menu 5
url2=""
for _ in $(seq 1 40); do
    url2=$(grep -o 'listening on http://[0-9.:]*' "$tmp/app.out" | sed -n 2p | cut -d' ' -f3 || true)
    [ -n "$url2" ] && break
    sleep 0.25
done
[ -n "$url2" ] || { echo "smoke: Start Server did not bring the endpoint back"; exit 1; }
has "$url2/health" '"status":"ok"'
say "tray menu → Start Server: the endpoint answers again at $url2"
# items: Open Chat, Models…, Settings…, Copy Endpoint URL, Stop Server, Quit (separators skipped)
sleep 1
menu 6 "$OUT/app-tray-menu.png"
say "tray menu → Quit"

code=""
for _ in $(seq 1 40); do
    if ! kill -0 "$app" 2>/dev/null; then
        wait "$app" && code=0 || code=$?
        break
    fi
    sleep 0.25
done
app_pid=$app
app=""
[ -n "$code" ] || { kill "$app_pid"; echo "smoke: the app did not quit from the tray menu"; exit 1; }
[ "$code" = 0 ] || { cat "$tmp/app.err"; echo "smoke: the app exited with $code"; exit 1; }
say "app quit from the tray menu with exit code 0"
