#!/usr/bin/env bash
# 16 clients × 4 jobs at once against one `ferry serve`: 64 distinct ids,
# 64 terminal states, and the resident device and host bytes (sampled every
# 50 ms) and every job's measured peaks never above the budgets.
source "$(dirname "$0")/serve-lib.sh"
DEV=$((64 << 20)); HOST=$((512 << 20))
start_server --keep-alive -1 --device-mem $DEV --host-mem $HOST --max-queue 128
( while kill -0 "$SERVER_PID" 2>/dev/null; do
    r=$(curl -sf "$URL/v1/residency" | jq -c '[([.models[].device_bytes]|add), ([.models[].host_bytes]|add)]') && echo "$r"
    sleep 0.05
  done >"$WORK/samples" ) &
SAMPLER=$!
for c in $(seq 16); do
  ( for k in $(seq 4); do submit "$(body ".seed=$((c * 10 + k))")"; done >"$WORK/ids.$c" ) &
done
wait $(jobs -p | grep -v "^$SAMPLER$" | grep -v "^$SERVER_PID$") 2>/dev/null || true
cat "$WORK"/ids.* >"$WORK/ids"
n=$(sort -u "$WORK/ids" | grep -c video_ || true)
echo "distinct ids: $n"
[ "$n" = 64 ] || { echo "FAIL: want 64 distinct ids"; exit 1; }
for id in $(cat "$WORK/ids"); do wait_terminal "$id" 600; done
declare -A count
over=0
for id in $(cat "$WORK/ids"); do
  j=$(job "$id"); st=$(jq -r .status <<<"$j"); count[$st]=$(( ${count[$st]:-0} + 1 ))
  jq -e ".measured.device_bytes <= $DEV and .measured.host_bytes <= $HOST" <<<"$j" >/dev/null || { over=1; echo "over budget: $(jq -c .measured <<<"$j")"; }
done
kill $SAMPLER 2>/dev/null || true
for st in "${!count[@]}"; do echo "$st: ${count[$st]}"; done
maxdev=$(jq -s 'map(.[0]) | max' "$WORK/samples"); maxhost=$(jq -s 'map(.[1]) | max' "$WORK/samples")
echo "sampled $(wc -l <"$WORK/samples") times: resident device max $maxdev / $DEV, host max $maxhost / $HOST"
[ "${count[completed]:-0}" = 64 ] || { echo "FAIL: want 64 completed"; exit 1; }
[ "$over" = 0 ] && [ "$maxdev" -le $DEV ] && [ "$maxhost" -le $HOST ] || { echo "FAIL: over budget"; exit 1; }
echo "PASS: 64 ids, 64 completed, within budgets"
