#!/bin/sh
# `make run`: serve ORIGIN behind snapshotd, or the example SPA when no ORIGIN is given. The
# example takes port EXAMPLE_PORT (3000) when it is free, else a free port the system gives:
# snapshotd never fronts whatever else holds 3000.
set -e
ORIGIN="$1"
PORT="${2:-8080}"
if [ -z "$ORIGIN" ]; then
  WANTED="${EXAMPLE_PORT:-3000}"
  EXAMPLE=$(python - "$WANTED" <<'PY'
import socket, sys
wanted = int(sys.argv[1])
for port in (wanted, 0):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
PY
)
  if [ "$EXAMPLE" != "$WANTED" ]; then
    echo "port $WANTED is taken by another program: the example SPA takes port $EXAMPLE"
  fi
  ORIGIN="http://127.0.0.1:$EXAMPLE"
  python -m examples.spa --port "$EXAMPLE" &
  EXAMPLE_PID=$!
  trap 'kill $EXAMPLE_PID 2>/dev/null' EXIT INT TERM
  # Up, and ours: the example answers its own script, and is still running.
  python - "$ORIGIN" "$EXAMPLE_PID" <<'PY'
import os, sys, time, urllib.request
origin, pid = sys.argv[1], int(sys.argv[2])
for _ in range(100):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    try:
        with urllib.request.urlopen(origin + "/app.js", timeout=1) as answer:
            if answer.status == 200:
                sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(f"the example SPA did not start on {origin}")
PY
  echo "example SPA on $ORIGIN"
fi
cat <<EOT

snapshotd on http://127.0.0.1:$PORT in front of $ORIGIN. Try:

  curl -s -A 'Mozilla/5.0 (compatible; Googlebot/2.1)' http://127.0.0.1:$PORT/items/3   # a bot: the rendered page
  curl -s http://127.0.0.1:$PORT/items/3                                                # a person: the app shell

The console and the API need a token: without SNAPSHOTD_API_TOKEN, snapshotd draws one now
and logs the console URL holding it, once, as "console: http://...#token=...". Open that URL.

EOT
snapshotd serve --origin "$ORIGIN" --port "$PORT"
