#!/usr/bin/env bash
# The prompt cache on a real-sized model: jobs alternating two prompts
# (new seeds) on one `ferry serve --prompt-cache`, from a cold page cache.
# A prompt seen before skips the text encoder (no text time, nothing read
# from the checkpoint); a new one streams it. Prints one line per job;
# fails if a repeated prompt ran the text encoder or a new one did not.
#   MODEL=DIR scripts/serve-promptcache.sh   (DIR: a Wan folder, e.g. from
#   `ferry synth --arch wan2.1-t2v-1.3b --out DIR`; DEV=4GiB HOST=8GiB SIZE=64x64)
source "$(dirname "$0")/serve-lib.sh"
[ -n "${MODEL:-}" ] || { echo "set MODEL to a Wan pipeline folder"; exit 2; }
name=$(basename "$MODEL")
sync
for f in "$MODEL"/*/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done
start_server --models "$MODEL" --keep-alive -1 --device-mem "${DEV:-4GiB}" --host-mem "${HOST:-8GiB}" --prompt-cache 256MiB
fail=0
declare -A seen
i=0
for p in "a red fox" "a red fox" "a blue bird" "a red fox" "a blue bird"; do
  i=$((i + 1))
  id=$(submit "$(jq -nc --arg m "$name" --arg p "$p" --argjson s "$i" --arg size "${SIZE:-64x64}" \
    '{model:$m,prompt:$p,negative_prompt:"blurry, low quality",size:$size,num_frames:1,num_inference_steps:1,guidance_scale:5,seed:$s,outputs:["report"]}')")
  wait_terminal "$id" 900
  j=$(job "$id")
  [ "$(jq -r .status <<<"$j")" = completed ] || { echo "job $i: $(jq -c '{status, error}' <<<"$j")"; exit 1; }
  rep=$(curl -sf "$URL/v1/videos/$id/content?variant=report")
  text=$(jq .measured.text_encoder_s <<<"$rep")
  printf '%-12s seed %d  job %6.2f s  text encoder %6.2f s  read %6.2f GB  cache %s\n' "$p" "$i" \
    "$(jq .measured.seconds <<<"$j")" "$text" "$(jq '.measured.bytes_read_disk/1e9' <<<"$rep")" \
    "$(curl -sf "$URL/v1/residency" | jq -c '.prompt_cache | {bytes, hits, misses}')"
  hit=$([ -n "${seen[$p]:-}" ] && echo true || echo false)
  ran=$(jq -n "$text > 0")
  if [ "$hit" = "$ran" ]; then echo "FAIL: job $i (prompt seen before: $hit) ran the text encoder: $ran"; fail=1; fi
  seen[$p]=1
done
[ "$fail" = 0 ] && echo PASS || { echo FAIL; exit 1; }
