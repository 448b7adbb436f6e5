#!/usr/bin/env bash
# Issue #58's first measurement on a lent GPU, in one device call, from the checkout's root after
# `. .gpu2/device_env.sh` (../shared/gpu/prepare.sh packs MLX's CUDA build): mlxchat's engine beside mlx-lm's
# BatchGenerator at 1, 8, 32 and 64 slots on random-weight llamas of SmolLM2's and a 1B shape (the default
# model's GGUF is too large to carry), bfloat16 and 4-bit, then the step's profile and the long-prompt scenario. Every table goes
# to $OUT (one file per run, and summary.txt); each run is bounded so that one that hangs leaves the rest.
set -u
OUT=${OUT:-/tmp/mlxchat-gpu}
mkdir -p "$OUT"
shim=$(mktemp -d)
mkdir -p "$shim/mlxchat"
echo "__path__ = ['$PWD']" > "$shim/mlxchat/__init__.py"  # `mlxchat` is this checkout (it is not installed there)
export PYTHONPATH="$shim:${PYTHONPATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1

run() {
  local name=$1 limit=$2
  shift 2
  echo "== $name: mlxchat bench $*" >> "$OUT/summary.txt"
  timeout "$limit" python3 -m mlxchat.app.cli bench "$@" > "$OUT/$name.txt" 2>&1
  echo "exit $?" >> "$OUT/$name.txt"
  grep -v '^bench:' "$OUT/$name.txt" >> "$OUT/summary.txt"
}

# The table first (a 135M llama in bfloat16), then the 1B shape, the prefill of 32 prompts, the step's
# profile (its parts and its graph's operations), 4-bit weights, the long prompt; each bounded.
run shape-135M 120 --shape 135M --engines mlxchat,mlx-lm-batch --slots 1,8,32,64 --max-tokens 128 --repeats 1
run shape-1B 150 --shape 1B --engines mlxchat,mlx-lm-batch --slots 1,8,32,64 --max-tokens 128 --repeats 1
run prefill-32 45 --shape 1B --engines mlxchat,mlx-lm-batch --slots 32 --max-tokens 8 --repeats 1
run profile-1B 60 --shape 1B --profile --slots 1,8,32,64 --max-tokens 32
run shape-1B-4bit 150 --shape 1B --bits 4 --engines mlxchat,mlx-lm-batch --slots 1,8,32,64 --max-tokens 128 --repeats 1
run long-135M 60 --shape 135M --scenario long
timeout 60 python3 scripts/gpu_prefill_passes.py 135M > "$OUT/prefill-passes.txt" 2>&1  # what a prompt pass costs by size
cat "$OUT/prefill-passes.txt" >> "$OUT/summary.txt"
echo "done" >> "$OUT/summary.txt"
