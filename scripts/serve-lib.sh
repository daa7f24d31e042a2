#!/usr/bin/env bash
# Shared by scripts/serve-*.sh: build ferry, make wan-tiny, start and stop
# `ferry serve` on loopback, submit and poll jobs with curl and jq.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "these scripts need jq (apt-get install jq)"; exit 2; }
command -v curl >/dev/null || { echo "these scripts need curl"; exit 2; }

WORK=$(mktemp -d /tmp/ferry-serve-XXXXXX)
PORT=${PORT:-$((20000 + RANDOM % 20000))}
URL=http://127.0.0.1:$PORT
SERVER_PID=

cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

go build -o "$WORK/ferry" ./cmd/ferry
"$WORK/ferry" synth --arch wan-tiny --out "$WORK/models/wan-tiny" >/dev/null 2>&1

# start_server [flags...]: ferry serve on $URL with $WORK/data, waits for /healthz.
start_server() {
  "$WORK/ferry" serve --listen 127.0.0.1:$PORT --data-dir "$WORK/data" --models "$WORK/models" "$@" \
    2>>"$WORK/server.log" &
  SERVER_PID=$!
  for _ in $(seq 200); do
    curl -sf "$URL/healthz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "server did not start:"; cat "$WORK/server.log"; exit 1
}

stop_server() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }
kill9_server() { kill -9 "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }

# body [jq-args]: a small wan-tiny request, edited by a jq filter.
body() { jq -nc '{model:"wan-tiny",prompt:"a red fox",size:"32x32",num_frames:5,num_inference_steps:2,guidance_scale:1,seed:7}'" | ${1:-.}"; }

# submit BODY: prints the job id.
submit() { curl -sf -X POST "$URL/v1/videos" -H 'Content-Type: application/json' -d "$1" | jq -r .id; }

job() { curl -sf "$URL/v1/videos/$1"; }
status() { job "$1" | jq -r .status; }

# wait_terminal ID [SECONDS]
wait_terminal() {
  local end=$((SECONDS + ${2:-120}))
  while [ $SECONDS -lt $end ]; do
    case $(status "$1") in completed|failed|cancelled) return 0 ;; esac
    sleep 0.05
  done
  echo "job $1 not terminal after ${2:-120}s"; return 1
}

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$SERVER_PID/status"; }
resident() { curl -sf "$URL/v1/residency" | jq '[.models[].device_bytes] | add'; }
resident_host() { curl -sf "$URL/v1/residency" | jq '[.models[].host_bytes] | add'; }
