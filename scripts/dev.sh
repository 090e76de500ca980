#!/usr/bin/env bash
# Start the Dagster UI and daemon (`dagster dev`) on the riskstream code location.
#
#   DAGSTER_HOME              instance directory   default .riskstream/dagster_home
#   RISKSTREAM_DAGSTER_HOST   UI host              default 127.0.0.1
#   RISKSTREAM_DAGSTER_PORT   UI port              default 3000
#   RISKSTREAM_STORE_URL, RISKSTREAM_DUCKDB_PATH, RISKSTREAM_DBT_PROJECT_DIR: see docs/orchestration.md
#
# Job control (set -m) puts `dagster dev` in its own process group so it receives SIGTERM;
# this script forwards INT/TERM to it and waits for it to stop its webserver and daemon.
set -euo pipefail
set -m
cd "$(dirname "$0")/.."

export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.riskstream/dagster_home}"
export DO_NOT_TRACK=1
HOST="${RISKSTREAM_DAGSTER_HOST:-127.0.0.1}"
PORT="${RISKSTREAM_DAGSTER_PORT:-3000}"
VENV_BIN="${RISKSTREAM_VENV_BIN:-$PWD/.venv/bin}"

mkdir -p "$DAGSTER_HOME"
if [ ! -f "$DAGSTER_HOME/dagster.yaml" ]; then
  cp deploy/dagster.dev.yaml "$DAGSTER_HOME/dagster.yaml"
elif ! cmp -s deploy/dagster.dev.yaml "$DAGSTER_HOME/dagster.yaml"; then
  # An instance seeded by an older checkout keeps its own settings (and misses, e.g., the
  # launch guard that refuses a bad rebuild at once): say so rather than overwrite them.
  echo "note: $DAGSTER_HOME/dagster.yaml differs from deploy/dagster.dev.yaml; keeping it" \
       "(copy deploy/dagster.dev.yaml over it for the checked-in instance settings)" >&2
fi
"$VENV_BIN/python" -m orchestration.prepare_dbt

# `dagster dev` gives SIGTERM whatever SIGINT does. A shell that is not interactive starts its
# background commands with SIGINT ignored, and a signal ignored when this script starts cannot
# be reset by it: `dagster dev` would then ignore SIGTERM as well and could only be killed,
# leaving its webserver and daemon behind. So it starts with SIGINT at its default (exec keeps
# a default or ignored disposition as it is).
"$VENV_BIN/python" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$VENV_BIN/dagster" dev -w workspace.yaml -h "$HOST" \
  -p "$PORT" &
DEV_PID=$!
echo "$DEV_PID" > "$DAGSTER_HOME/dagster-dev.pid"
echo "dagster dev (pid $DEV_PID) on http://$HOST:$PORT, DAGSTER_HOME=$DAGSTER_HOME"

stop() {
  kill -TERM "$DEV_PID" 2>/dev/null || true
  wait "$DEV_PID" 2>/dev/null || true
  rm -f "$DAGSTER_HOME/dagster-dev.pid"
}
trap 'stop; exit 0' INT TERM
wait "$DEV_PID"
