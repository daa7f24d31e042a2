#!/usr/bin/env bash
# kill -9 of `ferry serve` while a job is loading, encoding text, denoising,
# decoding and writing its output; then restart: no partial file is
# visible, every id is in a definite state, the queued jobs run, and the
# killed job re-runs; killed three times, it fails `interrupted` (it
# re-runs from scratch at most twice). FERRY_SERVE_SLOW_BLOCK slows every
# block so that each kill lands in the phase it aims at.
source "$(dirname "$0")/serve-lib.sh"
export FERRY_SERVE_SLOW_BLOCK=${FERRY_SERVE_SLOW_BLOCK:-100ms}
partials() { find "$WORK/data" -name '.tmp-*' -o -name '*.tmp' | grep -v journal.jsonl.tmp || true; }
check_outputs() {
  # Only completed jobs may have an outputs folder, and no temp file may
  # remain once the server is up again.
  for d in "$WORK/data/outputs"/*/; do
    [ -d "$d" ] || continue
    id=$(basename "$d"); st=$(status "$id")
    [ "$st" = completed ] || { echo "FAIL: $id is $st but has outputs"; exit 1; }
  done
  [ -z "$(partials)" ] || { echo "FAIL: partial files: $(partials)"; exit 1; }
}
fails=0
for phase in loading text denoise vae output; do
  rm -rf "$WORK/data"
  start_server --keep-alive -1
  victim=$(submit "$(body '.num_inference_steps=6')")
  q1=$(submit "$(body '.seed=2')"); q2=$(submit "$(body '.seed=3')")
  hit=no
  for _ in $(seq 2000); do
    p=$(job "$victim" | jq -r .phase)
    [ "$p" = "$phase" ] && { hit=yes; break; }
    [ "$(status "$victim")" = completed ] && break
    sleep 0.005
  done
  kill9_server
  start_server --keep-alive -1
  for id in $victim $q1 $q2; do wait_terminal "$id"; done
  check_outputs
  a=$(job "$victim" | jq -r '"\(.status) attempts=\(.attempts)"')
  s1=$(status "$q1"); s2=$(status "$q2")
  echo "kill in $phase (hit: $hit): killed job $a; queued jobs $s1 $s2"
  [ "$hit" = yes ] && [ "$a" = "completed attempts=2" ] || fails=1
  [ "$s1" = completed ] && [ "$s2" = completed ] || fails=1
  stop_server
done
# Three kills of the same job: it re-ran twice, then fails interrupted.
rm -rf "$WORK/data"
start_server --keep-alive -1
victim=$(submit "$(body '.num_inference_steps=20')")
for k in 1 2 3; do
  for _ in $(seq 2000); do [ "$(job "$victim" | jq -r .phase)" = denoise ] && break; sleep 0.005; done
  kill9_server
  start_server --keep-alive -1
done
wait_terminal "$victim"
a=$(job "$victim" | jq -r '"\(.status) \(.error.code) attempts=\(.attempts)"')
echo "killed three times: $a"
[ "$a" = "failed interrupted attempts=3" ] || fails=1
check_outputs
[ "$fails" = 0 ] && echo "PASS" || { echo "FAIL"; exit 1; }
