#!/usr/bin/env bash
# Two models whose weights together exceed the device budget, requests
# alternating (A B A B): both complete; no job's device peak beside what
# the other model held, nor any sampled resident set, is above the budget;
# and the second request of each model is faster than its first by at
# least the predicted load time (load_seconds of the plan the first job
# ran, as dispatch predicted it: what loading the weights the plan keeps
# costs, at the planner's rates).
#
# The models are wan-tiny with Wan 2.1 1.3B's transformer width and
# LAYERS layers (about 92 MB of bf16 a layer; go run
# ./tools/synthmid), so that a load takes seconds. Each request
# runs PLAN (default onload: the transformer moves to the device whole,
# from a host-tier copy that stays): the device budget holds one model,
# the host budget both copies, so each dispatch demotes the other model's
# device copy to its host copy and a model's second request reloads from
# there instead of the checkpoint.
# The checkpoints are dropped from the page cache first (cold start).
#   scripts/serve-twomodels.sh     (LAYERS=8 DEV=1GiB HOST=4GiB PLAN=onload COOL=20; VERBOSE=1 prints each job's report)
source "$(dirname "$0")/serve-lib.sh"
LAYERS=${LAYERS:-8} DEV=${DEV:-1GiB} HOST=${HOST:-4GiB} PLAN=${PLAN:-onload}
for i in 1 2; do
  go run ./tools/synthmid --out "$WORK/models/mid-$i" --seed "$i" --layers "$LAYERS"
done
# A cold start: the checkpoints leave the page cache (GNU dd's nocache
# advice, for these files only), so a first request reads them from disk.
# The advice drops clean pages only: the files just written are flushed
# first.
sync
for f in "$WORK"/models/mid-*/*/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done
# Memory freed moments ago is cheap to fill again on this VM (the
# planner's fillWarmLife, 12 s); a cold start on a machine that has not
# read these files lately has neither the files cached nor that memory
# warm. COOL seconds (default 20; 0 to skip) pass before the server starts.
sleep "${COOL:-20}"
start_server --keep-alive -1 --device-mem "$DEV" --host-mem "$HOST"
budget=$(curl -sf "$URL/v1/residency" | jq .budgets.device_bytes)

# Sample the resident device bytes (models and shared components) while
# the jobs run.
( while :; do
    curl -sf "$URL/v1/residency" | jq '([.models[].device_bytes] + [.shared[].device_bytes]) | add' >>"$WORK/samples" || true
    sleep 0.2
  done ) &
SAMPLER=$!

declare -A first_s first_load
fail=0
printf '%-4s %-6s %-5s %8s %9s %12s %12s  %s\n' job model warm seconds load_pred peak_device others plan
for i in 1 2 3 4; do
  m=mid-$(( (i - 1) % 2 + 1 ))
  id=$(submit "$(jq -nc --arg m "$m" --arg p "$PLAN" --argjson s "$i" \
    '{model:$m,prompt:"a red fox in the snow",size:"32x32",num_frames:1,num_inference_steps:2,guidance_scale:1,seed:$s,plan:$p,outputs:["report"]}')")
  wait_terminal "$id" 600
  j=$(job "$id")
  st=$(jq -r .status <<<"$j")
  [ "$st" = completed ] || { echo "job $i on $m: $st $(jq -c .error <<<"$j")"; exit 1; }
  secs=$(jq .measured.seconds <<<"$j"); load=$(jq '(.dispatched // .predicted).load_seconds // 0' <<<"$j")
  peak=$(jq .measured.device_bytes <<<"$j"); warm=$(jq '.measured.warm // false' <<<"$j")
  others=$(curl -sf "$URL/v1/residency" | jq --arg m "$m" '([.models[] | select(.name != $m) | .device_bytes] + [.shared[].device_bytes]) | add')
  printf '%-4s %-6s %-5s %8.2f %9.2f %12d %12d  %s\n' "$i" "$m" "$warm" "$secs" "$load" "$peak" "$others" "$(jq -r .measured.plan <<<"$j")"
  [ -n "${VERBOSE:-}" ] && { curl -sf "$URL/v1/videos/$id/content?variant=report" | jq -c '.measured | {total_s, text_encoder_s, denoise_s, vae_s, step_s, copy_wait_s, copy_s, bytes_read_disk, bytes_copied}'
    curl -sf "$URL/v1/residency" | jq -c '[.models[] | {name, device_bytes, host_bytes}]'; }
  if [ $((peak + others)) -gt "$budget" ]; then echo "FAIL: job $i peaked at $peak beside $others: over the budget $budget"; fail=1; fi
  if [ -z "${first_s[$m]:-}" ]; then
    first_s[$m]=$secs first_load[$m]=$load
  else
    saved=$(jq -n "${first_s[$m]} - $secs")
    ok=$(jq -n "$saved >= ${first_load[$m]}")
    printf '     %s: second request %.2fs faster than the first; predicted load %.2fs: %s\n' "$m" "$saved" "${first_load[$m]}" \
      "$([ "$ok" = true ] && echo ok || echo short)"
    [ "$ok" = true ] || fail=1
  fi
done
kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null || true
max=$(sort -n "$WORK/samples" | tail -1)
echo "sampled resident device bytes: max $max of budget $budget ($(wc -l <"$WORK/samples") samples); evictions $(curl -sf "$URL/v1/residency" | jq .evictions)"
[ "${max:-0}" -le "$budget" ] || { echo "FAIL: resident device bytes above the budget"; fail=1; }
[ "$fail" = 0 ] && echo "PASS" || { echo "FAIL"; exit 1; }
