#!/usr/bin/env bash
# Load test for `kiln serve`: 200 streamed requests (ShareGPT-like lengths, 10% of them
# dropping the connection mid-stream) at concurrency 32 against a small KV pool, then
# checks that nothing failed and that no KV pages or sequences leaked.
#
#   tests/serving/load_test.sh KILN_BINARY MODEL
#
# Exits with bench_serve.py's status (0 ok, 1 check failed, 2 server unreachable); 3 when
# the server does not start.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 KILN_BINARY MODEL" >&2
  exit 2
fi
KILN=$1
MODEL=$2
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH="$HERE/../../scripts/bench_serve.py"
LOG=$(mktemp "${TMPDIR:-/tmp}/kiln_load_test.XXXXXX")
SERVER_PID=

cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  rm -f "$LOG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$KILN" serve "$MODEL" --port 0 --kv-memory 8 >"$LOG" 2>&1 &
SERVER_PID=$!

URL=
for _ in $(seq 300); do  # up to 30 s to compile and bind
  URL=$(sed -n 's/^kiln serve: listening on \(http:\/\/[^ ]*\) .*/\1/p' "$LOG" | head -n 1)
  [ -n "$URL" ] && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -z "$URL" ]; then
  echo "load_test: the server did not start:" >&2
  cat "$LOG" >&2
  exit 3
fi
echo "load_test: $(grep '^kiln serve: listening' "$LOG")"

python3 "$BENCH" --url "$URL" --requests 200 --concurrency 32 --mix sharegpt \
  --prompt-len 48 --max-tokens 64 --disconnect-fraction 0.1 --seed 1 --timeout 60 --check
status=$?
if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "load_test: the server died during the run:" >&2
  cat "$LOG" >&2
  [ "$status" -eq 0 ] && status=1
fi
echo "load_test: $([ "$status" -eq 0 ] && echo PASS || echo "FAIL (status $status)")"
exit "$status"
