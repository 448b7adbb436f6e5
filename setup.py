"""Builds mlxchat's compiled CPU kernels (engine/cpu/kernels) with CMake, when a compiler is there.

Everything else about the package is in pyproject.toml. A build that fails leaves the kernels
out, with a warning: the engine then runs MLX's own operations (`mlxchat doctor` says so). On x86
the kernels are one module per level (engine/cpu/kernels/levels.py): a build in place (`make setup`,
`pip install -e .`) makes this CPU's alone, a wheel every level; MLXCHAT_KERNEL_LEVELS chooses otherwise.
"""

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNELS = Path(__file__).parent / "engine" / "cpu" / "kernels"


def _levels_module():
    """engine/cpu/kernels/levels.py, loaded by its path (the package is not importable while it is built)."""
    spec = importlib.util.spec_from_file_location("mlxchat_kernel_levels", KERNELS / "levels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class OptionalCMakeBuild(build_ext):
    """Runs engine/cpu/kernels/CMakeLists.txt once for every module and places them where the package expects."""

    def build_extensions(self) -> None:
        if os.environ.get("MLXCHAT_SKIP_KERNELS"):  # `make setup` builds them in a second step
            self.extensions = []
            return
        output = Path(self.get_ext_fullpath(self.extensions[0].name)).resolve().parent
        # A build folder that outlives the install (`make setup` keeps one in the venv): a later build
        # of the same sources compiles only what changed.
        build = Path(os.environ.get("MLXCHAT_KERNEL_BUILD") or Path(self.build_temp) / "kernels").resolve()
        build.mkdir(parents=True, exist_ok=True)
        in_place = bool(getattr(self, "editable_mode", False) or self.inplace)
        try:
            wanted = LEVELS.to_build(os.environ.get(LEVELS.BUILD_VARIABLE), in_place) if LEVELS.x86() else []
            print(f"mlxchat: building the compiled kernels{' for ' + ', '.join(wanted) if wanted else ''} "
                  f"(about {40 * len(wanted or [1])} s on 2 cores)...", file=sys.stderr, flush=True)
            started = time.monotonic()
            subprocess.run(["cmake", str(KERNELS.resolve()), f"-DPython_EXECUTABLE={sys.executable}",
                            f"-DOUTPUT_DIR={output}", "-DCMAKE_BUILD_TYPE=Release",
                            f"-DMLXCHAT_LEVELS={';'.join(wanted)}"], cwd=build, check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["cmake", "--build", ".", "--parallel", str(os.cpu_count() or 2)], cwd=build, check=True)
            print(f"mlxchat: the compiled kernels built in {time.monotonic() - started:.0f} s", file=sys.stderr)
            built = [LEVELS.module_name(level) for level in wanted] if LEVELS.x86() else ["_ext"]
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            built = []  # nothing to install: the package works without them
            print(f"mlxchat: the compiled kernels were not built ({exc}); MLX's own operations will run",
                  file=sys.stderr)
        self.extensions = [ext for ext in self.extensions if ext.name.rsplit(".", 1)[1] in built]
        # An editable checkout keeps an earlier build's modules beside the sources: one not built now would run, unseen.
        for stale in KERNELS.glob("_ext*.*"):
            if stale.suffix in (".so", ".pyd") and stale.name.split(".")[0] not in built:
                stale.unlink()


LEVELS = _levels_module()
setup(
    # On x86 a module per level (this build makes those LEVELS.to_build names), elsewhere one.
    ext_modules=[Extension(f"mlxchat.engine.cpu.kernels.{name}", sources=[])
                 for name in ([LEVELS.module_name(level) for level in LEVELS.LEVELS] if LEVELS.x86() else ["_ext"])],
    cmdclass={"build_ext": OptionalCMakeBuild},
)
