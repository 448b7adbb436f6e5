"""`mlxchat bench --scenario kv`: each way the slots may store K/V (kv_dtype), side by side on the loaded model.

For each type: the bytes a token takes; teacher-forced agreement with a float64 reference (the same weights,
dequantized, every operation in float64, mlx-lm's own cache): one prompt read in one pass through the slots,
whose attention reads the stored K/V, and at each position whether the top token is float64's, with the
mean distance of the logits; and greedy replies against float32 K/V, as the engine writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mlx.core as mx

    from mlxchat.engine.loading.models import LoadedModel

KV_SCENARIO = "kv"
TEACHER_TOKENS = 1024  # positions compared with float64
GREEDY_CHATS = 8
GREEDY_TOKENS = 128


@dataclass
class KVRecord:
    """One stored type: its size, its agreement with float64, its greedy replies against float32's."""

    kv_dtype: str
    bytes_per_token: int
    positions: int
    top1_agreement: float  # of the teacher-forced positions, the share whose top token is float64's
    mean_logit_error: float  # mean |logit - float64 logit| over every position and vocabulary entry
    replies_equal: int  # greedy replies equal to float32 K/V's, token for token
    replies: int
    first_difference: int | None  # the earliest token where a reply left float32's (None: none did)


def run_kv_bench(loaded: LoadedModel, *, teacher_tokens: int = TEACHER_TOKENS, chats: int = GREEDY_CHATS,
                 max_tokens: int = GREEDY_TOKENS) -> list[KVRecord]:
    """Every stored type on `loaded` (an MLX folder or GGUF, not a --shape model: float64 reloads its weights)."""
    import mlx.core as mx

    from mlxchat.engine.bench.long_scenario import long_prompt
    from mlxchat.engine.kv.kv_types import STORABLE
    from mlxchat.engine.loading.models import float_model

    prompt = long_prompt(loaded.tokenizer, teacher_tokens)
    with mx.stream(mx.cpu):  # float64 runs on the CPU only
        reference = float_model(loaded.mlx_path, "float64")
        want = _teacher_forced(reference, prompt, None)
        del reference
    greedy = {t: _greedy(loaded, t, chats, max_tokens) for t in STORABLE}
    records = []
    for kv_dtype in STORABLE:
        got = _teacher_forced(loaded.model, prompt, kv_dtype).astype(mx.float64)
        agree = mx.mean(mx.argmax(got, axis=-1) == mx.argmax(want, axis=-1)).item()
        error = mx.mean(mx.abs(got - want)).item()
        same = [a == b for a, b in zip(greedy[kv_dtype], greedy["float32"])]
        firsts = [_first_difference(a, b) for a, b in zip(greedy[kv_dtype], greedy["float32"])]
        records.append(KVRecord(
            kv_dtype, _bytes_per_token(loaded, kv_dtype), len(prompt), agree, error, sum(same), len(same),
            min((f for f in firsts if f is not None), default=None),
        ))
    return records


def _teacher_forced(model: object, prompt: list[int], kv_dtype: str | None) -> mx.array:
    """Logits at every position of `prompt` read in one pass: through one slot storing K/V as `kv_dtype`, or
    (None) through mlx-lm's own cache."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from mlxchat.engine.kv import attention
    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.kv.slot_store import SlotKVStore

    if kv_dtype is None:
        cache = make_prompt_cache(model)
    else:
        store = SlotKVStore.for_model(model, 1, len(prompt), attention.install(model), KVType(kv_dtype))
        cache = store.batch([0], len(prompt))
    logits = model(mx.array([prompt]), cache=cache)[0]  # type: ignore[operator]
    mx.eval(logits)
    return logits


def _greedy(loaded: LoadedModel, kv_dtype: str, chats: int, max_tokens: int) -> list[list[int]]:
    """The engine's greedy replies to the short workload's chats, all at once, K/V stored as `kv_dtype`."""
    from dataclasses import replace

    from mlxchat.engine.bench.workloads import make_workload
    from mlxchat.engine.events import SamplingParams
    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    workload = make_workload(loaded, "short", chats, max_tokens)
    need = max(len(p) for p in workload.prompts) + max_tokens + 1
    request = SlotRequest(chats, chats * need, parallel_max=chats, per_slot_floor=0, per_slot_min=need)
    plan = replace(loaded.facts.evaluate(request, capped=False), kv_type=KVType(kv_dtype))
    engine = Engine(loaded.ready, plan)
    try:
        sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        handles = [engine.submit(i, tokens=p, sampling=sampling) for i, p in enumerate(workload.prompts)]
        for h in handles:
            h.result(600)
        return engine.call(lambda: [list(s.history[len(p):]) for s, p in
                                    zip(engine.core.slots, workload.prompts)]).result(60)
    finally:
        engine.shutdown()


def _bytes_per_token(loaded: LoadedModel, kv_dtype: str) -> int:
    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.kv.kinds import model_footprint

    return model_footprint(loaded.model, KVType(kv_dtype)).bytes_per_token


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def format_kv_table(model: str, device: str, records: list[KVRecord]) -> str:
    """The records as a table: one line per stored type."""
    lines = [
        f"model {model} | device {device} | teacher-forced over {records[0].positions} tokens against float64; "
        f"greedy replies against float32 K/V",
        f"{'kv_dtype':9}  {'bytes/token':>11}  {'vs float32':>10}  {'top-1 agree':>11}  {'mean |dlogit|':>13}  "
        f"{'replies = float32':>17}  {'first diff':>10}",
    ]
    base = next(r.bytes_per_token for r in records if r.kv_dtype == "float32")
    for r in records:
        first = "-" if r.first_difference is None else str(r.first_difference)
        lines.append(f"{r.kv_dtype:9}  {r.bytes_per_token:>11,}  {r.bytes_per_token / base:>9.3f}x  "
                     f"{100 * r.top1_agreement:>10.2f}%  {r.mean_logit_error:>13.2e}  "
                     f"{f'{r.replies_equal} of {r.replies}':>17}  {first:>10}")
    return "\n".join(lines)
