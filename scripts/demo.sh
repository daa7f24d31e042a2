#!/bin/sh
# make demo: synthesise the tiny random-weight Wan 2.1 model once (cached in
# .cache/), then generate a short clip under a small device budget, streaming
# the transformer block by block, and print the memory report.
set -eu
cd "$(dirname "$0")/.."
BIN=bin/ferry
MODEL=.cache/wan-tiny
OUT=out
if [ ! -d "$MODEL" ]; then
	echo "== synthesising $MODEL (random weights, once)"
	"$BIN" synth --arch wan-tiny --seed 1 --out "$MODEL"
fi
mkdir -p "$OUT"
echo "== generating $OUT/demo.gif with a 64 MiB device budget (transformer streamed, prefetch 1)"
"$BIN" generate --model "$MODEL" \
	--prompt "A cat walks on the grass, realistic" \
	--height 128 --width 128 --frames 9 --steps 8 --seed 42 \
	--plan stream --device-mem 64MiB --host-mem 1GiB \
	--out "$OUT/demo.gif" --report "$OUT/demo-report.json" --trace "$OUT/demo-trace.json"
echo "== report: $OUT/demo-report.json, Chrome trace: $OUT/demo-trace.json (open in ui.perfetto.dev)"
echo "   the weights are random: the clip is noise-like by design; see README for a real Wan 2.1 folder"
