#!/usr/bin/env bash
# Issue #58's suite on a lent GPU, after `. .gpu2/device_env.sh` in the same command: installs the wheels the suite
# needs beyond MLX (carried in .whl: the MCP SDK, the OpenAI client, mlx-vlm, ...) and runs every test on 8 workers,
# each failure named in $OUT/suite.txt. The wheel test builds the CPU kernels for every level: not a GPU matter.
set -u
OUT=${OUT:-/tmp/mlxchat-gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$HOME/mlx-gpu" .whl/*.whl
timeout "${1:-280}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE --timeout 120 \
  --deselect tests/test_layout.py::test_the_wheel_installs_only_mlxchat_with_every_package_and_stylesheet \
  > "$OUT/suite.txt" 2>&1
echo "exit $?" >> "$OUT/suite.txt"
tail -40 "$OUT/suite.txt"
