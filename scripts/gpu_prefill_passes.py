"""#58 on a lent GPU: what one prompt pass costs by its size, twice each (the second free of first-use compiling).

The long-prompt scenario on an H200 read a 3000-token prompt 35.7x slower beside 3 streaming chats than alone:
pacing shrank its chunks to the fewest (8 tokens) because each prompt pass cost about 50 ms whatever its size.
This times passes of 8 to 512 tokens through the engine on its own thread, each into a fresh slot, and prints
a row per size: ms the first time, ms the second, ms a token. Run after `. .gpu2/device_env.sh`:
    python3 scripts/gpu_prefill_passes.py 135M > $OUT/prefill_passes.txt
"""
import sys
import time

from mlxchat.engine.bench.mlxchat_runner import engine_for
from mlxchat.engine.bench.shapes import build_shape
from mlxchat.engine.events import SamplingParams

loaded = build_shape(sys.argv[1] if len(sys.argv) > 1 else "135M")
engine = engine_for(loaded, 4, 1200)
print("tokens  first ms  again ms  ms a token (again)")
for n in (8, 16, 32, 64, 128, 256, 512):
    times = []
    for attempt in range(2):
        engine.clear(0, park=False)
        started = time.perf_counter()
        engine.submit(0, tokens=list(range(1 + attempt, n + 1 + attempt)), sampling=SamplingParams(max_tokens=1)).result()
        times.append((time.perf_counter() - started) * 1e3)
    print(f"{n:6d}  {times[0]:8.1f}  {times[1]:8.1f}  {times[1] / n:8.3f}", flush=True)
