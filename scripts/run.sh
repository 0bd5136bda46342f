#!/bin/sh
# `make run`: serve ORIGIN behind snapshotd, or the example SPA when no ORIGIN is given.
set -e
ORIGIN="$1"
PORT="${2:-8080}"
if [ -z "$ORIGIN" ]; then
  ORIGIN="http://127.0.0.1:3000"
  python -m examples.spa --port 3000 &
  EXAMPLE_PID=$!
  trap 'kill $EXAMPLE_PID 2>/dev/null' EXIT INT TERM
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
