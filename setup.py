"""Builds mlxchat's compiled CPU kernels (engine/cpu/kernels) with CMake, when a compiler is there.

Everything else about the package is in pyproject.toml. A build that fails leaves the kernels
out, with a warning: the engine then runs MLX's own operations (`mlxchat doctor` says so).
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNELS = Path(__file__).parent / "engine" / "cpu" / "kernels"


class OptionalCMakeBuild(build_ext):
    """Runs engine/cpu/kernels/CMakeLists.txt and places the module where the package expects it."""

    def build_extension(self, ext: Extension) -> None:
        if os.environ.get("MLXCHAT_SKIP_KERNELS"):  # `make setup` builds them in a second step
            self.extensions.remove(ext)
            return
        output = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        # A build folder that outlives the install (`make setup` keeps one in the venv): a later build
        # of the same sources compiles only what changed.
        build = Path(os.environ.get("MLXCHAT_KERNEL_BUILD") or Path(self.build_temp) / "kernels").resolve()
        build.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(["cmake", str(KERNELS.resolve()), f"-DPython_EXECUTABLE={sys.executable}",
                            f"-DOUTPUT_DIR={output}", "-DCMAKE_BUILD_TYPE=Release"], cwd=build, check=True)
            subprocess.run(["cmake", "--build", ".", "--parallel"], cwd=build, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            self.extensions.remove(ext)  # nothing to install: the package works without it
            # An editable checkout keeps an earlier build's module beside the sources: it would run, unseen.
            for stale in KERNELS.glob("_ext.*"):
                stale.unlink()
            print(f"mlxchat: the compiled kernels were not built ({exc}); MLX's own operations will run",
                  file=sys.stderr)


setup(
    ext_modules=[Extension("mlxchat.engine.cpu.kernels._ext", sources=[])],
    cmdclass={"build_ext": OptionalCMakeBuild},
)
