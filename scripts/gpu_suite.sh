#!/usr/bin/env bash
# Issue #58's suite on a lent GPU, after `. .gpu2/device_env.sh` in the same command: installs the wheels the suite
# needs beyond MLX (scripts/gpu_wheels.sh puts them in .whl: the MCP SDK, the OpenAI client, mlx-vlm, ...) and runs every test on 14 workers,
# each result named in $OUT/suite.txt as it comes; at the time limit pytest is interrupted (SIGINT), so it still
# prints the failures' tracebacks (the H200's first run, killed, printed none). The wheel test builds the CPU kernels
# for every level: not a GPU matter.
set -u
OUT=${OUT:-/tmp/mlxchat-gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$HOME/mlx-gpu" .whl/*.whl
timeout -s INT -k 20 "${1:-280}" python3 -m pytest -v -n 14 -p no:cacheprovider -rfE --tb=short --timeout 120 \
  --deselect tests/test_layout.py::test_the_wheel_installs_only_mlxchat_with_every_package_and_stylesheet \
  > "$OUT/suite.txt" 2>&1
echo "exit $?" >> "$OUT/suite.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/suite.txt" | tail -40
