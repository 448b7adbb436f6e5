"""Every vision-language module of the installed mlx-vlm (the rule: tests/vlm_modules.py) has the outcome that
tests/vision_outcomes.py lists for it: it sees (the engine's SEEING_FAMILIES), it is refused at load, or it is not
made tiny, for the reason listed. Those that see and those refused are driven in tests/engine/test_vision.py."""

from __future__ import annotations

from tests.markers import needs_cpu
from tests.vision_outcomes import NO_SPEC, NOT_CHAT, NOT_TINY, REFUSED_AT_LOAD
from tests.vlm_modules import NotTiny, tiny_model, vlm_modules
from tests.vlm_specs import FAMILIES


def module_of(model_type: str) -> str:
    """The mlx-vlm module that loads a config of `model_type` (lfm2-vl's is lfm2_vl)."""
    from mlx_vlm.utils import MODEL_REMAPPING

    return MODEL_REMAPPING.get(model_type, model_type)


def test_every_vlm_module_sees_is_refused_at_load_or_is_not_made_tiny_as_listed():
    from mlxchat.engine.loading.vision import SEEING_FAMILIES

    modules = set(vlm_modules())
    sees, refused, not_tiny = {module_of(f) for f in SEEING_FAMILIES}, set(REFUSED_AT_LOAD), set(NOT_TINY)
    assert not (sees & refused or sees & not_tiny or refused & not_tiny)
    listed = sees | refused | not_tiny
    assert listed == modules, {"in mlx-vlm, no outcome listed": sorted(modules - listed),
                               "listed, not a vision-language module of mlx-vlm": sorted(listed - modules)}
    tiny = {module_of(spec["config"]["model_type"]) for spec in FAMILIES.values()}
    assert sees | refused <= tiny, {"no tiny model in tests/vlm_specs.py": sorted((sees | refused) - tiny)}


@needs_cpu  # (the outcomes are the CPU build's, as the family matrix's are)
def test_a_module_not_made_tiny_is_so_for_the_reason_listed():
    """A generic tiny model of each (tests/vlm_modules.py) fails with the words listed, or builds where the module
    is listed as lacking its tiny processor (NO_SPEC, and what stands in the way where it is known); a model that is
    not a chat model is listed so by hand."""
    wrong = {}
    for name, why in NOT_TINY.items():
        if why in NOT_CHAT:
            continue
        try:
            tiny_model(name)
            said = NO_SPEC
        except NotTiny as exc:
            said = str(exc)
        if not (why.startswith(said) if said == NO_SPEC else why in said):
            wrong[name] = said
    assert not wrong, wrong
