#!/usr/bin/env bash
# ferry serve on NATS JetStream with real processes: an API node
# running the embedded NATS server, two worker processes that join it, 20
# jobs; one worker is killed (kill -9) while both are running a job. Every
# job must complete; the killed worker's job after exactly 2 runs (it is
# redelivered once the ack wait, 30 s, lapses), every other job after 1.
# Needs curl and jq. Prints one line per check and exits non-zero on a miss.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "needs jq (apt-get install jq)"; exit 2; }
WORK=$(mktemp -d /tmp/ferry-nats-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
port() { echo $((20000 + RANDOM % 20000)); }
API_PORT=$(port); NATS_PORT=$(port); W1_PORT=$(port); W2_PORT=$(port)
API=http://127.0.0.1:$API_PORT

go build -o "$WORK/ferry" ./cmd/ferry
"$WORK/ferry" synth --arch wan-tiny --out "$WORK/models/wan-tiny" >/dev/null 2>&1
export FERRY_SERVE_SLOW_BLOCK=${FERRY_SERVE_SLOW_BLOCK:-20ms} # long enough jobs to kill one mid-run

# node NAME PORT FLAGS...: start a ferry serve process, wait for /healthz.
node() {
	local name=$1 p=$2; shift 2
	"$WORK/ferry" serve --listen 127.0.0.1:"$p" --data-dir "$WORK/$name" --models "$WORK/models" "$@" 2>>"$WORK/$name.log" &
	PIDS+=($!)
	eval "PID_$name=$!"
	for _ in $(seq 200); do curl -sf "http://127.0.0.1:$p/healthz" >/dev/null && return 0; sleep 0.05; done
	echo "$name did not start:"; cat "$WORK/$name.log"; exit 1
}
node api "$API_PORT" --nats embedded --nats-listen 127.0.0.1:"$NATS_PORT" --role api
node w1 "$W1_PORT" --nats nats://127.0.0.1:"$NATS_PORT" --role worker --worker-name w1
node w2 "$W2_PORT" --nats nats://127.0.0.1:"$NATS_PORT" --role worker --worker-name w2

IDS=()
for i in $(seq 20); do
	IDS+=("$(curl -sf -X POST "$API/v1/videos" -d "{\"model\":\"wan-tiny\",\"prompt\":\"a red fox\",\"size\":\"32x32\",\"num_frames\":5,\"num_inference_steps\":4,\"guidance_scale\":1,\"seed\":$i}" | jq -r .id)")
done
running() { curl -sf "$API/v1/videos?limit=100" | jq '[.data[] | select(.status=="in_progress")] | length'; }
for _ in $(seq 400); do [ "$(running)" = 2 ] && break; sleep 0.02; done
[ "$(running)" = 2 ] || { echo "FAIL: never saw both workers busy"; exit 1; }
kill -9 "$PID_w1"
echo "killed worker w1 (kill -9) while both workers ran a job; waiting for all 20 jobs (the redelivery takes the 30 s ack wait)"
end=$((SECONDS + 180))
while [ $SECONDS -lt $end ]; do
	left=$(curl -sf "$API/v1/videos?limit=100" | jq '[.data[] | select(.status=="queued" or .status=="in_progress")] | length')
	[ "$left" = 0 ] && break
	sleep 0.5
done
fail=0
summary=$(curl -sf "$API/v1/videos?limit=100" | jq -c '{completed: [.data[] | select(.status=="completed")] | length,
	other: [.data[] | select(.status!="completed") | .status], reruns: [.data[] | select(.attempts!=1) | .attempts]}')
echo "result: $summary"
[ "$(jq .completed <<<"$summary")" = 20 ] || { echo "FAIL: not all 20 jobs completed"; fail=1; }
[ "$(jq -c .reruns <<<"$summary")" = "[2]" ] || { echo "FAIL: want exactly one job run twice (the killed one)"; fail=1; }
for id in "${IDS[@]}"; do
	n=$(curl -sf "$API/v1/videos/$id/content" | wc -c)
	[ "$n" -gt 0 ] || { echo "FAIL: no video for $id"; fail=1; }
done
[ $fail = 0 ] && echo "PASS: 20/20 completed, the killed worker's job re-ran once on the other worker, every video downloadable"
exit $fail
