#!/bin/sh
# make test-sanitize: the compiled kernels built under AddressSanitizer and UBSan (float-cast-overflow included, every
# report fatal) into their own folder, then the kernel-facing tests and a short end-to-end decode run on that build.
# What it takes (learnt the hard way): libasan preloaded with libstdc++ (with libasan alone the first C++ exception
# mlx throws and catches aborts the process), MLX's buffer cache off (it hides overruns), symbols kept.
set -eu
ROOT="$(pwd)"
BUILD="$ROOT/.venv/kernel-asan"
OUT="$BUILD/out"
mkdir -p "$BUILD" "$OUT"
# (on x86: the module for this CPU's level alone)
LEVEL="$(.venv/bin/python -c "from mlxchat.engine.cpu.kernels import levels; print(levels.to_build('native', True)[0])")"
(cd "$BUILD" && cmake "$ROOT/engine/cpu/kernels" -DPython_EXECUTABLE="$ROOT/.venv/bin/python" -DOUTPUT_DIR="$OUT" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANITIZE=ON -DMLXCHAT_LEVELS="$LEVEL" > cmake.log && cmake --build . --parallel > build.log)
export MLXCHAT_KERNELS_FROM="$OUT" MLXCHAT_NO_MLX_CACHE=1
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
.venv/bin/python -c "from mlxchat.engine.cpu import kernels; s = kernels.status(); print('kernels:', s.detail); \
assert s.active and kernels.__path__[0] == '$OUT', 'the sanitized kernels did not load'"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/engine/test_kernels.py tests/engine/test_stored_weights.py \
    tests/engine/test_sampling.py tests/engine/test_engine.py tests/engine/test_scheduler.py tests/engine/test_reasoning.py \
    tests/engine/test_kv_types.py tests/engine/test_int8_rows.py tests/engine/test_layer_stack.py
# End to end: the tiny model's replies at 1 and 3 slots, greedy and sampled, in the engine as the app runs it.
.venv/bin/python -m pytest -q -p no:cacheprovider tests/engine/test_families.py -k "llama and not quantized"
echo "test-sanitize: no report"
