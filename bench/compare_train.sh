#!/usr/bin/env bash
# Compare one training step (forward + backward) of one Wan2.1-1.3B
# transformer block (1280 tokens, batch 1, text 512, random weights,
# 2 threads) in ferry and in PyTorch fp32, LoRA rank 32 on the default
# targets and full fine-tuning, interleaved round by round so that machine
# noise hits all alike; prints the medians and the ratios.
#
#   bench/compare_train.sh [rounds]        (default 5; run from anywhere)
#
# Installs Debian's python3-torch and OpenBLAS with apt when missing;
# nothing in the tests needs them.
set -euo pipefail
rounds=${1:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3   # Debian's python: the one python3-torch installs into

if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "installing python3-torch and libopenblas0-pthread with apt..." >&2
	apt-get install -y python3-torch libopenblas0-pthread >&2
fi

export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 FERRY_THREADS=2

bin=$(mktemp -d)/ferry-trainblock
trap 'rm -rf "$(dirname "$bin")"' EXIT
(cd "$root" && go build -o "$bin" ./bench/trainblock)

results=$(mktemp)
for ((r = 1; r <= rounds; r++)); do
	echo "round $r/$rounds" >&2
	for mode in lora full; do
		"$bin" -mode "$mode" -rounds 1 >>"$results"
		(cd "$root/bench" && "$python" torch_train_block.py --mode "$mode" --rounds 1 --threads 2) >>"$results"
	done
done

"$python" - "$results" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, secs = line.split()
    times.setdefault(name, []).append(float(secs))
med = {k: statistics.median(v) for k, v in times.items()}
for k in sorted(med):
    print(f"{k:12s} median {med[k]:.3f} s over {len(times[k])} rounds: {' '.join(f'{t:.3f}' for t in times[k])}")
print("ratio: " + ", ".join(f"torch-{m} / ferry-{m} = {med['torch-' + m] / med['ferry-' + m]:.2f}x" for m in ("lora", "full")))
PY
rm -f "$results"
