#!/bin/sh
# Few-read verdicts before → after (issue 27, branch fewreads): every preset of the four models, the anr decoders
# with and without a declared topk:2, under the source tree $1 (its src/), rows into $2/*.json.
# usage: sh bench/fewreads.sh /work/cache/fewreads/base /work/cache/fewreads/before
set -e
tree=$1; out=$2; here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
P=A8W8,A16W8,BF16,FP16,BFP16,MX9,MXINT8,MXFP8_E4M3
for m in anr_fa_decoder anr_ar_decoder; do
  PYTHONPATH="$tree/src:$here" OMP_NUM_THREADS=1 nice -n 5 python "$here/bench/declared_readings.py" --model $m \
    --reading logprobs=topk:2 --presets $P --json "$out/$m.json" > "$out/$m.log" 2>&1
done
for m in tashkeel khmersm; do
  PYTHONPATH="$tree/src:$here" OMP_NUM_THREADS=1 nice -n 5 python "$here/bench/declared_readings.py" --model $m \
    --presets $P --json "$out/$m.json" > "$out/$m.log" 2>&1
done
