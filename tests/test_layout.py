"""The shape of the code, read from its source: no import cycle, engine free of Textual, app free of MLX
at import time, CPU-only code in engine/cpu; and the wheel installs one name, mlxchat, with every package."""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlxchat.engine
import mlxchat.engine.bench
from mlxchat.engine.cpu.kernels import levels

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "engine" / "cpu" / "kernels"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Installed package -> source folder, as pyproject's package-dir maps them.
PACKAGE_DIRS: dict[str, Path] = {
    name: ROOT / folder for name, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items()
}
MLX = ("mlx", "mlx_lm")
# The engine's doors: the app's (every name the app uses), and the bench's (the bench command's alone).
DOORS = {"mlxchat.engine": mlxchat.engine._NAMES, "mlxchat.engine.bench": mlxchat.engine.bench._NAMES}
BENCH_COMMAND = ("mlxchat.app.commands.bench", "mlxchat.app.commands.bench_flags", "mlxchat.app.bench")
PUBLIC_NAMES_AT_MOST = 60


@dataclass(frozen=True)
class Import:
    """One import statement's target module, and whether it runs when its module is imported."""

    target: str
    module_level: bool
    line: int


def modules() -> dict[str, Path]:
    """Every module of the installed packages, by dotted name (a package by its __init__)."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, module_level: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The import statements under `node`, with whether they run at import time. Those under `if TYPE_CHECKING`
    never run but count: a circle that only the type checker walks is still a circle in the design."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from _walk(ast.Module(body=child.body, type_ignores=[]), False)
            yield from _walk(ast.Module(body=child.orelse, type_ignores=[]), module_level)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, module_level
        inner = module_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(child, inner)


def imports(name: str) -> list[Import]:
    """What module `name` imports: modules of this project by their dotted name, others by their top name."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    for node, module_level in _walk(ast.parse(path.read_text(), str(path)), True):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: `from . import x` is the package itself, each extra dot one up
                parents = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parents + ([base] if base else []))
            targets = [_from_target(base, alias.name) for alias in node.names]
        found += [Import(target, module_level, node.lineno) for target in targets]
    return found


def _from_target(base: str, name: str) -> str:
    """The module `from base import name` loads: a submodule, the module defining a lazy public name, or base."""
    if f"{base}.{name}" in MODULES:
        return f"{base}.{name}"
    if name in DOORS.get(base, {}):
        return DOORS[base][name].partition(":")[0]
    return base


def internal(target: str) -> str | None:
    """The project module `target` names (a dotted path inside one of ours), if it is ours."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


GRAPH: dict[str, list[Import]] = {name: imports(name) for name in MODULES}


def test_there_is_no_import_cycle_at_module_or_function_level() -> None:
    edges = {
        name: sorted({t for i in found if (t := internal(i.target)) and t != name}) for name, found in GRAPH.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
    assert len(MODULES) > 60  # the walk found the project


def _engine_room(module: str) -> str:
    """An engine module's place in the engine's layering: its folder (cpu, kv, loading, ...), or the module
    itself at the engine's top level."""
    parts = MODULES[module].relative_to(ROOT / "engine").parts
    return parts[0] if len(parts) > 1 else module


def test_no_arrow_climbs_back_between_the_engine_s_folders() -> None:
    """Folders and top-level modules of the engine depend on each other one way only: a folder never
    imports a module that (through any chain) imports that folder again."""
    engine = [name for name in MODULES if name.startswith("mlxchat.engine.")]
    edges: dict[str, set[str]] = {}
    for name in engine:
        for i in GRAPH[name]:
            target = internal(i.target)
            if target and target.startswith("mlxchat.engine.") and _engine_room(target) != _engine_room(name):
                edges.setdefault(_engine_room(name), set()).add(_engine_room(target))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    climbs = sorted(f"{room} -> {target}" for room, targets in edges.items() for target in targets
                    if reaches(target, room, set()))
    assert not climbs, "arrows that come back:\n" + "\n".join(climbs)


def _engine_imports(name: str) -> Iterator[tuple[int, str, list[str]]]:
    """Each import of an engine module by module `name`: its line, the module, the names it takes."""
    for node, _ in _walk(ast.parse(MODULES[name].read_text()), True):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name, []) for a in node.names if a.name.startswith("mlxchat.engine"))
        elif (node.module or "").startswith("mlxchat.engine"):
            yield node.lineno, node.module or "", [a.name for a in node.names]


def test_the_app_uses_only_the_engine_s_public_api() -> None:
    """app/ imports `mlxchat.engine`'s public names (engine/__init__.py), never an engine module itself; the bench
    command alone imports the bench's (engine/bench/__init__.py)."""
    bad = []
    for name in MODULES:
        if not name.startswith("mlxchat.app"):
            continue
        for line, module, names in _engine_imports(name):
            bench = module == "mlxchat.engine.bench" and name.startswith(BENCH_COMMAND)
            if module != "mlxchat.engine" and not bench:
                bad.append(f"{name}:{line} imports {module}")
            bad += [f"{name}:{line} imports {n} from {module}, not public" for n in names if n not in DOORS[module]]
    assert not bad, "\n".join(bad)


def test_the_engine_s_door_lets_in_only_what_the_app_uses() -> None:
    """Every public name of mlxchat.engine (and of its bench) is imported somewhere in app/, and the engine's door
    stays narrow: the app's plumbing (thread streams, file modes) and the bench's internals stay inside."""
    used = {(module, n) for name in MODULES if name.startswith("mlxchat.app")
            for _, module, names in _engine_imports(name) for n in names}
    unused = sorted(f"{door}.{n}" for door, names in DOORS.items() for n in names if (door, n) not in used)
    assert not unused, "public names no module of app/ imports: " + ", ".join(unused)
    assert len(mlxchat.engine._NAMES) <= PUBLIC_NAMES_AT_MOST, sorted(mlxchat.engine._NAMES)


def test_no_module_is_over_450_lines() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 450}
    assert not long


def test_the_engine_never_imports_textual() -> None:
    def ui_or_app(target: str) -> bool:
        return target.split(".")[0] in ("textual", "rich") or (internal(target) or "").startswith("mlxchat.app")

    bad = [
        f"{name}:{i.line} imports {i.target}"
        for name, found in GRAPH.items() if name.startswith("mlxchat.engine")
        for i in found if ui_or_app(i.target)
    ]
    assert not bad


def test_the_app_loads_no_mlx_at_import_time() -> None:
    """Directly or through the engine modules it imports: the CLI must load its BLAS before mlx.core."""

    def chain_to_mlx(name: str, seen: set[str]) -> list[str] | None:
        for i in GRAPH[name]:
            if not i.module_level:
                continue
            if i.target.split(".")[0] in MLX:
                return [name, i.target]
            ours = internal(i.target)
            if ours and ours not in seen:
                seen.add(ours)
                rest = chain_to_mlx(ours, seen)
                if rest:
                    return [name, *rest]
        return None

    bad = [chain for name in MODULES if name.startswith(("mlxchat.app", "mlxchat.themes"))
           if (chain := chain_to_mlx(name, {name}))]
    assert not bad, "\n".join(" -> ".join(chain) for chain in bad)
    script = "import sys, mlxchat.engine, mlxchat.app.cli; assert 'mlx.core' not in sys.modules, 'mlx loaded'"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_cpu_only_code_lives_in_engine_cpu() -> None:
    """Outside engine/cpu (and engine/devices, which names the device), no engine module asks for the CPU."""
    bad = []
    for name, path in MODULES.items():
        if not name.startswith("mlxchat.engine") or name.startswith(("mlxchat.engine.cpu", "mlxchat.engine.bench")):
            continue
        if name == "mlxchat.engine.devices":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "cpu":
                bad.append(f"{name}:{node.lineno} uses .cpu")
            if isinstance(node, ast.Constant) and node.value == "cpu":
                bad.append(f"{name}:{node.lineno} compares with 'cpu'")
    assert not bad


def _built_from(build: Path) -> Path | None:
    """The sources a CMake build folder was configured for, if it is one."""
    cache = build / "CMakeCache.txt"
    lines = cache.read_text().splitlines() if cache.is_file() else []
    home = next((line.split("=", 1)[1] for line in lines if line.startswith("CMAKE_HOME_DIRECTORY:")), None)
    return Path(home).resolve() if home else None


def test_the_wheel_installs_only_mlxchat_with_every_package_and_stylesheet(tmp_path: Path) -> None:
    # Built from a copy, so the checkout gets no build/ or egg-info folder.
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.so")
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in PACKAGE_DIRS.values():
        shutil.copytree(folder, source / folder.name, ignore=ignore)
    env = dict(os.environ)
    kept = Path(sys.prefix) / "kernel-build"  # `make setup`'s build of the kernels
    if _built_from(kept) == KERNELS.resolve():  # (not another copy's: CMake refuses a folder of other sources)
        # The kernels' sources as the checkout's own folder, so CMake reuses that build (it compiles only
        # what changed since; a build of them all takes a minute and a half on 2 cores).
        kernels = source / KERNELS.relative_to(ROOT)
        shutil.rmtree(kernels)
        kernels.symlink_to(KERNELS, target_is_directory=True)
        env["MLXCHAT_KERNEL_BUILD"] = str(kept)
    # In a session of its own, so that a build past the time limit ends with its compilers (killing pip alone left
    # them running, adopted by PID 1, for half an hour on a loaded machine).
    build = subprocess.Popen(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
         str(source)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    try:
        _, stderr = build.communicate(timeout=400)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    assert build.returncode == 0, stderr
    (wheel,) = (tmp_path / "dist").glob("mlxchat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # `pip install .` builds the compiled kernels (setup.py, CMake, this machine's compiler).
    modules = {n.split("/")[-1].split(".")[0] for n in names if n.startswith("mlxchat/engine/cpu/kernels/_ext")}
    # A wheel is for other machines: on x86 it holds every level's module (levels.py), elsewhere the one.
    assert modules == ({levels.module_name(level) for level in levels.LEVELS} if levels.x86() else {"_ext"})
    assert {n.split("/")[0] for n in names} == {"mlxchat", "-".join(wheel.name.split("-")[:2]) + ".dist-info"}
    # Every package folder of the source is in the wheel: pyproject's package list has not drifted.
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert {n.rpartition("/")[0].replace("/", ".") for n in names if n.endswith("/__init__.py")} == packages
    stylesheets = {p.relative_to(ROOT) for folder in PACKAGE_DIRS.values() for p in folder.rglob("*.tcss")}
    wheel_sheets = {n for n in names if n.endswith(".tcss")}
    assert len(stylesheets) >= 9 and len(wheel_sheets) == len(stylesheets)
    for sheet in stylesheets:
        assert "mlxchat/" + str(sheet) in wheel_sheets


def test_no_class_of_the_app_declares_attributes_typed_any() -> None:
    """A class says what it holds with its types: no `name: Any` in a class body (a mixin borrowing its host's
    attributes untyped, as PaneKeys did)."""
    bad = []
    for name, path in MODULES.items():
        if not name.startswith("mlxchat.app"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bad += [f"{name}:{item.lineno} {node.name}.{ast.unparse(item.target)}: Any" for item in node.body
                        if isinstance(item, ast.AnnAssign) and ast.unparse(item.annotation) == "Any"]
    assert not bad, "\n".join(bad)


def test_only_the_workarounds_import_textual_s_private_modules() -> None:
    """What leans on Textual's internals (textual._*) is in app/ui/workarounds, each saying what it works around."""
    bad = [f"{name}:{i.line} imports {i.target}" for name, found in GRAPH.items()
           if name.startswith("mlxchat.app") and not name.startswith("mlxchat.app.ui.workarounds")
           for i in found if i.target.startswith("textual._")]
    assert not bad, "\n".join(bad)
