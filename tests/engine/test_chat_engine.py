"""The local and the remote engine offer the session the same calls (mlxchat.engine.chat_engine)."""

from __future__ import annotations

import inspect

import pytest

from mlxchat.engine.chat_engine import ChatEngine
from mlxchat.engine.remote.engine import RemoteEngine
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.loading.batch_check import ready_for_slots

CALLS = [name for name, value in vars(ChatEngine).items() if inspect.isfunction(value) and not name.startswith("_")]


@pytest.mark.parametrize("engine", [Engine, RemoteEngine], ids=["local", "remote"])
def test_each_engine_takes_every_call_as_the_protocol_names_it(engine: type) -> None:
    assert set(CALLS) == {"submit", "cancel", "clear", "bind", "repartition", "shutdown", "snapshot", "count_tokens",
                         "image_tokens"}
    for name in CALLS:
        wanted = inspect.signature(getattr(ChatEngine, name)).parameters
        offered = inspect.signature(getattr(engine, name)).parameters
        for parameter in wanted.values():
            assert parameter.name in offered, f"{engine.__name__}.{name} lacks {parameter.name}"
            assert offered[parameter.name].kind == parameter.kind, f"{engine.__name__}.{name}({parameter.name})"
        extra = [p for p in offered.values() if p.name not in wanted]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{engine.__name__}.{name}: {extra}"
    assert isinstance(inspect.getattr_static(engine, "alive"), property)


def test_each_engine_says_its_slot_plan(tiny_model_dir) -> None:
    """`plan`, which the protocol names too: the local engine's follows its scheduler through a repartition."""
    from mlx_lm.utils import load_tokenizer

    from tests.engine.test_families import plan
    from tests.tiny_families import build_family

    assert "plan" in ChatEngine.__annotations__
    engine = Engine(ready_for_slots(build_family("llama"), load_tokenizer(tiny_model_dir)), plan(parallel=4))
    try:
        assert engine.plan.parallel == 4
        engine.repartition(plan(parallel=2)).result(30)
        assert engine.plan.parallel == 2
    finally:
        engine.shutdown()
