#!/usr/bin/env bash
# The shape sweep over every visible GPU at once: SHARDS shards (``bench --shard K/SHARDS``), GPU g
# running shards g, g + G, ... one after another (each GPU times only its own process's programs).
# Records OUT/sweep_K.json (merge them with benchmarks/record_dispatch.py) and logs OUT/sweep_K.log.
#
#   benchmarks/sweep_on_gpus.sh OUT SHARDS [bench arguments...]
#   benchmarks/sweep_on_gpus.sh out 4 --variants default,xla,jax --repeats 10 --recheck 30 --no-torch
set -uo pipefail
out=$1 shards=$2
shift 2
mkdir -p "$out"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
for ((g = 0; g < gpus && g < shards; g++)); do
  (for ((k = g; k < shards; k += gpus)); do
     CUDA_VISIBLE_DEVICES=$g python3 -m jaxrules bench --suite sweep --shard "$k/$shards" \
       --record "$out/sweep_$k.json" "$@" > "$out/sweep_$k.log" 2>&1
   done) &
done
wait
