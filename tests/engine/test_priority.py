"""The engine's threads run below the UI thread's priority (Linux), so a key press does not wait for a matmul.

Runs in a fresh interpreter: the BLAS must load (and start its workers) before anything imports mlx.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markers import needs_cpu

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, os, sys, threading
from mlxchat.engine.cpu.blas import blas_workers, load_blas
from mlxchat.engine.cpu.priority import thread_ids
blas = load_blas("auto")
from mlx_lm import load
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.plan import SlotRequest, plan_slots
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.loading.batch_check import ready_for_slots
model, tokenizer = load(sys.argv[1])
plan = plan_slots(SlotRequest(2, 256, per_slot_floor=64, per_slot_min=32), trained_ctx=None, kv_bytes_per_token=0)
before = thread_ids()
engine = Engine(ready_for_slots(model, tokenizer), plan, nice=int(sys.argv[2]))
engine.submit(0, tokens=[1, 2, 3], sampling=SamplingParams(max_tokens=3, ignore_eos=True)).result(timeout=60)
nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
def nices(tids):
    seen = []
    for tid in tids:
        try:
            seen.append(nice(tid))
        except ProcessLookupError:  # (a thread that ended since it was listed, on a busy machine)
            pass
    return seen
print(json.dumps({
    "blas": blas.kind, "main": nice(threading.get_native_id()), "engine": nice(engine._thread.native_id),
    "workers": nices(blas_workers()),
    "started_by_engine": nices(thread_ids() - before - {engine._thread.native_id}),
}))
engine.shutdown()
"""


def seen_in_fresh_interpreter(script: str, *args: str) -> dict:
    """What `script` prints last (JSON), run in an interpreter of its own."""
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def engine_threads(model_dir: Path, nice: int) -> dict:
    return seen_in_fresh_interpreter(SCRIPT, str(model_dir), str(nice))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice values per thread are Linux's")
def test_the_engine_its_threads_and_the_blas_workers_run_below_the_caller(tiny_model_dir: Path) -> None:
    seen = engine_threads(tiny_model_dir, 7)
    assert seen["main"] == 0
    assert seen["engine"] == 7
    # MLX's stream threads start from the engine's thread, so they run at its nice value.
    assert seen["started_by_engine"] and set(seen["started_by_engine"]) == {7}
    # Whatever the BLAS, the workers it started run below the caller; OpenBLAS always starts some.
    assert set(seen["workers"]) <= {7} and (seen["workers"] or seen["blas"] != "openblas")


def test_nice_zero_leaves_every_thread_at_the_callers_priority(tiny_model_dir: Path) -> None:
    seen = engine_threads(tiny_model_dir, 0)
    assert seen["engine"] == seen["main"] == 0
    assert set(seen["workers"] + seen["started_by_engine"]) <= {0}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice values per thread are Linux's")
def test_the_app_s_engine_runs_at_the_engine_nice_setting(tiny_model_dir: Path) -> None:
    """`engine_nice` from the settings reaches the engine the app starts."""
    import os

    from tests.pilot import make_app, ready, run

    seen: list[int] = []

    async def scenario(app, pilot) -> None:
        await ready(app, pilot)
        seen.append(os.getpriority(os.PRIO_PROCESS, app.session.engine._thread.native_id))

    run(make_app(tiny_model_dir, engine_nice=5), scenario)
    assert seen == [max(5, os.getpriority(os.PRIO_PROCESS, 0))]  # (a caller already lower stays so)


# The kernels' workers start from whichever thread calls first (here the main one, at the UI's priority, as the
# self-test or a model's load does); a call from an engine thread run at 7 must then have them work at 7 too.
KERNEL_SCRIPT = """
import json, os, threading
import mlx.core as mx
from mlxchat.engine.cpu import kernels
from mlxchat.engine.cpu.priority import thread_ids
ext = kernels.status().module
weights = list(mx.quantize(mx.random.normal((8192, 512), key=mx.random.key(0)), 32, 4))
x = mx.random.normal((1, 512), key=mx.random.key(1))

def matmuls(count):
    for _ in range(count):
        mx.eval(ext.weights_matmul(x, weights, 4, 32, False, 2)[0])

def cpu_ms():
    seen = {}
    for tid in thread_ids():
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seen[tid] = (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")
    return seen

matmuls(20)
before = cpu_ms()
busy = []
def engine():
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 7)
    with mx.stream(mx.new_stream(mx.cpu)):  # (a stream thread started from here, as the engine's are)
        # Until both threads have worked a while: on a busy machine (the suite's other worker) the caller can take
        # most of the worker's tasks, so a fixed count of calls left the worker idle.
        for _ in range(100):
            matmuls(200)
            after = cpu_ms()
            tids = [tid for tid in after if after[tid] - before.get(tid, 0) >= 50]
            # (read while the engine's stream thread lives: it may end with this thread)
            busy[:] = [os.getpriority(os.PRIO_PROCESS, tid) for tid in tids]
            if len(busy) >= 2:
                return
thread = threading.Thread(target=engine)
thread.start()
thread.join()
print(json.dumps({"busy": busy}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice values per thread are Linux's")
@needs_cpu  # (the kernels run on the CPU only)
def test_the_kernels_workers_run_at_their_callers_priority() -> None:
    busy = seen_in_fresh_interpreter(KERNEL_SCRIPT)["busy"]
    assert len(busy) >= 2 and set(busy) == {7}  # the stream's thread and the kernels' worker, at the caller's 7
