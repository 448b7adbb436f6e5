"""`mlxchat bench --profile`: where one decode step's time goes on this machine, part by part.

Each slot first reads a prompt through the engine as a chat would; then decode passes over all the slots are
built and evaluated one at a time, on the engine's thread, with the compiled kernels counting their calls' wall
time by part. A step's time splits into: building its graph in Python, each kind of kernel, MLX's own operations
(the rest of the evaluation), and reading the tokens back. The engine overlaps the next step's Python with this
step's evaluation; here they run one after the other, so the parts add up to the step's whole cost. Where the
kernels do not run (a GPU), the evaluation is MLX's alone; the step's graph is counted too, by kind of operation,
since on a GPU each operation is at least one kernel launch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mlxchat.engine.bench.registry import BenchRefused

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

PROMPT_TOKENS = 128
WARM_STEPS = 4


@dataclass
class StepProfile:
    """The mean of `steps` decode steps at `slots` slots: milliseconds a step by part."""

    slots: int
    steps: int
    isa: str  # the kernels' level, or the device where they do not run
    python_ms: float  # building the pass's graph (the model's layers, the sampler's operations)
    kernels_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # part -> (ms a step, calls a step)
    mlx_ms: float = 0.0  # MLX's own operations: the evaluation less the kernels' calls
    read_ms: float = 0.0  # the tokens back to Python
    step_ms: float = 0.0
    operations: dict[str, int] = field(default_factory=dict)  # kind of operation -> how many in one step's graph


def profile_decode(loaded: LoadedModel, slot_counts: list[int], steps: int = 32,
                   on_case: Callable[[int], None] = lambda n: None) -> list[StepProfile]:
    """Profiles `steps` decode passes at each number of slots, each slot holding a prompt of PROMPT_TOKENS tokens."""
    from mlxchat.engine.bench.mlxchat_runner import close_engines
    from mlxchat.engine.cpu import kernels
    from mlxchat.engine.devices import device_kind

    ext = kernels.status().module if kernels.active_here() else None
    if ext is None and device_kind() == "cpu":
        raise BenchRefused(f"--profile counts the compiled kernels' calls, which do not run here: "
                           f"{kernels.status().detail}")
    try:
        profiles = []
        for n in slot_counts:
            on_case(n)
            profiles.append(_profile(loaded, n, steps, ext))
        return profiles
    finally:
        close_engines()


def _profile(loaded: LoadedModel, slots: int, steps: int, ext: Any) -> StepProfile:
    import mlx.core as mx

    from mlxchat.engine.bench.mlxchat_runner import engine_for
    from mlxchat.engine.events import SamplingParams
    from mlxchat.engine.sampling import SlotSampler, sample_rows

    engine = engine_for(loaded, slots, PROMPT_TOKENS + WARM_STEPS + steps + 2)
    prompt = list(range(1, PROMPT_TOKENS + 1))
    for handle in [engine.submit(s, tokens=prompt, sampling=SamplingParams(max_tokens=1)) for s in range(slots)]:
        handle.result()
    core = engine.core
    ids = list(range(slots))
    samplers = [SlotSampler(SamplingParams()) for _ in ids]

    def run() -> StepProfile:
        tokens = mx.array([1] * slots)
        python = read = evaluation = 0.0
        operations: dict[str, int] = {}
        for step in range(WARM_STEPS + steps):
            if step == WARM_STEPS:
                if ext is not None:
                    ext.profile_start()
                python = read = evaluation = 0.0
            started = time.perf_counter()
            logits = core.forward.logits(tokens[:, None], core.store.batch(ids, 1), None)
            tokens = sample_rows(logits, samplers)
            built = time.perf_counter()
            if step == 0:
                operations = count_operations(tokens)
                built = time.perf_counter()
            mx.eval(tokens)
            evaluated = time.perf_counter()
            tokens.tolist()
            core.store.commit(ids, [1] * slots)
            python += built - started
            evaluation += evaluated - built
            read += time.perf_counter() - evaluated
        read_out = ext.profile_read() if ext is not None else []
        parts = {part: (ns / 1e6 / steps, calls / steps) for part, ns, calls in read_out}
        in_kernels = sum(ms for ms, _ in parts.values())
        where = ext.isa() if ext is not None else str(mx.default_device())
        return StepProfile(slots, steps, where, python * 1e3 / steps, parts,
                           evaluation * 1e3 / steps - in_kernels, read * 1e3 / steps,
                           (python + evaluation + read) * 1e3 / steps, operations)

    try:
        return engine.call(run).result()
    finally:
        for slot in ids:
            engine.clear(slot, park=False)


def count_operations(outputs: Any) -> dict[str, int]:
    """How many operations of each kind the graph behind `outputs` holds (not evaluated), from MLX's dot export."""
    import re
    import tempfile

    import mlx.core as mx

    with tempfile.NamedTemporaryFile("w+", suffix=".dot") as dot:
        mx.export_to_dot(dot, outputs)
        dot.seek(0)
        labels = re.findall(r'label\s*="([^"]+)"', dot.read())
    counts: dict[str, int] = {}
    for label in labels:
        if re.search(r"[A-Za-z]", label):  # operations are named; arrays are labelled by their shapes
            kind = label.split()[0]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def format_profile(profiles: list[StepProfile]) -> str:
    """The profiles side by side: one row a part, one column a slot count (ms a step, and its share)."""
    where = f"{profiles[0].isa} kernels" if any(p.kernels_ms for p in profiles) else f"{profiles[0].isa}, no kernels"
    header = f"one decode step, by part ({where}; ms a step, share of the step)"
    parts = sorted({part for p in profiles for part in p.kernels_ms}, key=lambda part: -max(
        p.kernels_ms.get(part, (0.0, 0.0))[0] for p in profiles))
    rows: list[tuple[str, list[float]]] = [("Python: the pass's graph", [p.python_ms for p in profiles])]
    rows += [(f"kernel: {part}", [p.kernels_ms.get(part, (0.0, 0.0))[0] for p in profiles]) for part in parts]
    rows += [("MLX's own operations", [p.mlx_ms for p in profiles]),
             ("tokens back to Python", [p.read_ms for p in profiles])]
    width = max(len(name) for name, _ in rows) + 2
    lines = [header, "part".ljust(width) + "".join(f"{f'{p.slots} slot(s)':>20}" for p in profiles)]
    for name, values in rows:
        lines.append(name.ljust(width) + "".join(
            f"{f'{ms:.2f} ms {ms / p.step_ms:5.1%}':>20}" for ms, p in zip(values, profiles)))
    lines.append("step".ljust(width) + "".join(f"{f'{p.step_ms:.2f} ms':>20}" for p in profiles))
    calls = [f"{part}: " + " / ".join(f"{p.kernels_ms.get(part, (0.0, 0.0))[1]:.0f}" for p in profiles)
             for part in parts]
    if calls:
        lines.append("kernel calls a step: " + "; ".join(calls))
    lines.append("operations in a step's graph: " + " / ".join(str(sum(p.operations.values())) for p in profiles))
    top = sorted(profiles[-1].operations.items(), key=lambda item: -item[1])[:8]
    lines.append(f"most at {profiles[-1].slots} slot(s): " + ", ".join(f"{kind} {n}" for kind, n in top))
    return "\n".join(lines)
