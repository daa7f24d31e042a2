#!/usr/bin/env bash
# 50 wan-tiny jobs back to back on one `ferry serve`: after each job the
# server's RSS and the resident device bytes must stay within max(2%, 64 MiB)
# of the first job's, with no upward trend (the mean of the last 10 within
# the same bound of the first 10's). Prints one line per job and a verdict.
#   scripts/serve-soak.sh            (N=50 by default; N=10 for a quick run)
source "$(dirname "$0")/serve-lib.sh"
N=${N:-50}
start_server --keep-alive -1 --device-mem 256MiB --host-mem 1GiB
tol() { local a=$1; local p=$((a / 50)); echo $(( p > 65536 ? p : 65536 )); }  # KiB
first_rss= first_dev=
rss_list=()
for i in $(seq "$N"); do
  id=$(submit "$(body ".seed=$i")")
  wait_terminal "$id"
  st=$(status "$id")
  [ "$st" = completed ] || { echo "job $i: $st: $(job "$id" | jq -c .error)"; exit 1; }
  rss=$(rss_kib); dev=$(resident)
  [ -z "$first_rss" ] && first_rss=$rss first_dev=$dev
  rss_list+=("$rss")
  secs=$(job "$id" | jq .measured.seconds)
  printf 'job %2d  %6.2fs  rss %7d KiB  device %9d B\n' "$i" "$secs" "$rss" "$dev"
  if [ "$dev" != "$first_dev" ]; then echo "FAIL: device bytes $dev after job $i, first $first_dev"; exit 1; fi
  d=$((rss - first_rss)); d=${d#-}
  if [ "$d" -gt "$(tol "$first_rss")" ]; then echo "FAIL: RSS $rss KiB after job $i, first $first_rss KiB"; exit 1; fi
done
k=$(( N >= 20 ? 10 : N / 2 ))
head_mean=$(printf '%s\n' "${rss_list[@]:0:$k}" | awk '{s+=$1} END {print int(s/NR)}')
tail_mean=$(printf '%s\n' "${rss_list[@]: -$k}" | awk '{s+=$1} END {print int(s/NR)}')
d=$((tail_mean - head_mean))
echo "RSS mean of the first $k: $head_mean KiB, of the last $k: $tail_mean KiB (drift $d KiB)"
if [ "$d" -gt "$(tol "$head_mean")" ]; then echo "FAIL: RSS trends upward"; exit 1; fi
echo "PASS: $N jobs, device bytes constant at $first_dev, RSS within max(2%, 64 MiB)"
