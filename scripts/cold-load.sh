#!/usr/bin/env bash
# A cold run of ferry generate against its prediction: the model folder's
# checkpoints leave the page cache (flushed first: the advice drops clean
# pages only), COOL seconds pass (memory freed moments before is cheap to
# fill again on a VM whose balloon reports free memory, so a cold start
# waits), then one request with --report; it prints what the planner
# predicted and what was measured, the probe's disk rate, and each
# component's load (copy) time.
#   scripts/cold-load.sh MODEL_DIR [generate flags...]    (COOL=20; FERRY=path to a built ferry)
#   e.g. scripts/cold-load.sh /tmp/mid-1 --height 32 --width 32 --frames 1 --steps 2 --guidance 1 \
#          --plan resident --device-mem 1GiB --host-mem 4GiB
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,11p' "$0"; exit 2; }
command -v jq >/dev/null || { echo "this script needs jq (apt-get install jq)"; exit 2; }
model=$1; shift
work=$(mktemp -d /tmp/ferry-cold-XXXXXX)
trap 'rm -rf "$work"' EXIT
ferry=${FERRY:-}
if [ -z "$ferry" ]; then
  (cd "$(dirname "$0")/.." && go build -o "$work/ferry" ./cmd/ferry)
  ferry=$work/ferry
fi
sync
find "$model" -name '*.safetensors' -exec dd if={} iflag=nocache count=0 status=none \;
sleep "${COOL:-20}"
"$ferry" generate --model "$model" --prompt "a red fox in the snow" --report "$work/report.json" \
  --out "$work/out.avi" "$@" >"$work/log" 2>&1 || { tail -3 "$work/log"; exit 1; }
jq -r '
  .predicted as $p | .measured as $m |
  "disk probe      \($p.disk_gbps * 100 | round / 100) GB/s (\($p.disk_note))",
  (["text_encoder_s", "denoise_s", "vae_s", "total_s"][] as $k |
    "\($k | .[0:-2] | . + "               " | .[0:15]) predicted \($p[$k] * 100 | round / 100) s, measured \($m[$k] * 100 | round / 100) s"),
  "load (copy)     predicted \([$p.components[].copy_s] | add * 100 | round / 100) s, measured \($m.copy_s * 100 | round / 100) s",
  ($p.components[] | "  \(.name): predicted copy \(.copy_s * 100 | round / 100) s (disk read \(.read_s * 100 | round / 100) s, page-cache fill \(.fill_s * 100 | round / 100) s), \(.placement)")
' "$work/report.json"
