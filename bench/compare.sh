#!/usr/bin/env bash
# Compare one Wan2.1-1.3B transformer block (1280 tokens, batch 2, text 512,
# random weights, 2 threads) in ferry (fp32 and bf16) and in PyTorch fp32,
# interleaved round by round so that machine noise hits all alike; prints
# the medians and one ratio line.
#
#   bench/compare.sh [rounds]        (default 5; run from anywhere)
#
# Installs Debian's python3-torch and OpenBLAS (pthread build, which
# PyTorch's BLAS calls and ferry's "openblas" GEMM load) with apt when
# missing; nothing in the tests needs them.
set -euo pipefail
rounds=${1:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3   # Debian's python: the one python3-torch installs into

if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "installing python3-torch and libopenblas0-pthread with apt..." >&2
	apt-get install -y python3-torch libopenblas0-pthread >&2
fi

# Both sides get 2 threads and OpenBLAS's AVX-512 kernels (ferry sets the
# core type itself; PyTorch's OpenBLAS reads the variable).
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 FERRY_THREADS=2

bin=$(mktemp -d)/ferry-block
trap 'rm -rf "$(dirname "$bin")"' EXIT
(cd "$root" && go build -o "$bin" ./bench/block)

results=$(mktemp)
for ((r = 1; r <= rounds; r++)); do
	echo "round $r/$rounds" >&2
	"$bin" -dtype fp32 -rounds 1 >>"$results"
	"$bin" -dtype bf16 -rounds 1 >>"$results"
	"$python" "$root/bench/torch_block.py" --dtype fp32 --rounds 1 --threads 2 >>"$results"
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
t = med["torch-fp32"]
print(f"ratio: torch-fp32 / ferry-fp32 = {t / med['ferry-fp32']:.2f}x, torch-fp32 / ferry-bf16 = {t / med['ferry-bf16']:.2f}x")
PY
rm -f "$results"
