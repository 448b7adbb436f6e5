"""Loading the draft model (`draft_model`) beside the target, as the target is loaded, and refusing one that cannot
draft for it: a vocabulary of its own (its token ids would mean other words), or layers that cannot give back the
K/V of drafts the target did not take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from mlxchat.engine.loading.progress import ModelLoadError, Progress
from mlxchat.engine.speculation.drafter import DraftModel

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel, LoadOptions
    from mlxchat.engine.plan import SlotPlan, SlotRequest

DRAFT_REMEDY = ("set draft_model to a model with the target's tokenizer (a smaller model of its family), or unset it "
                '(speculative = "lookup" needs no draft model)')


class DraftRefused(ModelLoadError):
    """The draft model loads but cannot draft for the target; the message says why and what to change."""


def load_draft(spec: str, target: LoadedModel, options: LoadOptions, progress: Callable[[Progress], None]
               ) -> tuple[DraftModel, LoadedModel]:
    """Loads `spec` as `target` was loaded (the same `options`) and checks that it can draft for it; raises
    ModelLoadError (the spec itself) or DraftRefused (what it is) saying what to change."""
    from mlxchat.engine.loading.models import load_model

    progress(Progress(f"Loading the draft model {spec}", 0, 0))
    try:
        draft = load_model(spec, options, progress)
    except ModelLoadError as e:
        raise ModelLoadError(f"draft_model: {e}") from e.__cause__
    name, of = draft.source.display_name, target.source.display_name
    differs = target.vocabulary_difference(draft)
    if differs:
        raise DraftRefused(f"The draft model {name} does not share {of}'s vocabulary ({differs}): its tokens would "
                           f"mean other words. To draft, {DRAFT_REMEDY}.")
    # A recurrent state folds every token in: nothing gives back the drafts the target did not take. (A window's ring
    # can: past its size a rolled-back draft slot reads its tokens again, as any slot does; engine.kv.window.)
    if draft.kv_footprint.recurrent_bytes_per_slot:
        raise DraftRefused(f"The draft model {name} has recurrent layers, whose state cannot give back the drafts {of} "
                           f"did not take. To draft, {DRAFT_REMEDY}.")
    cost = draft.weights_bytes / max(target.weights_bytes, 1)
    return DraftModel(draft.ready, name, draft.kv_type, len(target.tokenizer.get_vocab()), cost), draft


def short_training(held: LoadedModel, plan: SlotPlan) -> str | None:
    """The warning for a draft model trained on fewer tokens than a slot of `plan` holds; None where it was not."""
    if held.trained_ctx is None or held.trained_ctx >= plan.per_slot:
        return None
    return (f"The draft model {held.source.display_name} was trained on {held.trained_ctx} tokens, fewer than a "
            f"slot's {plan.per_slot}: past them its drafts are rarely taken (replies stay the same)")


def agreement(target: LoadedModel, draft: LoadedModel, text: str) -> float:
    """The share of `text`'s positions where the draft's most likely next token is the target's (each reading the
    text whole): the chance a greedy draft's token is taken, measured without a chat."""
    import mlx.core as mx

    tokens = mx.array([target.tokenizer.encode(text)])
    picks = [mx.argmax(m.model(tokens)[0, :-1], axis=-1) for m in (target, draft)]
    return mx.mean(picks[0] == picks[1]).item()


# What `mlxchat doctor` measures a draft model's agreement on: prose and code, as chats quote them.
SAMPLE = ("The user asks a question and the assistant answers it with care. Paris is the capital of France, and "
          "Berlin is the capital of Germany. def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n")


def describe_draft(spec: str, target: LoadedModel, options: LoadOptions, request: SlotRequest,
                   progress: Callable[[Progress], None]) -> tuple[LoadedModel, SlotPlan, str]:
    """`mlxchat doctor`'s draft model: loaded as the start loads it (raising ModelLoadError or DraftRefused as the
    start would), `request`'s plan with its K/V in the same slots, and a line on what it is, what it holds, and how
    often it agrees with the target."""
    from mlxchat.engine.memory import format_bytes

    _, held = load_draft(spec, target, options, progress)
    plan = target.facts_with(held).evaluate(request)
    share = agreement(target, held, SAMPLE)
    return held, plan, (f"{held.source.display_name}, {held.dtype}, {format_bytes(held.weights_bytes)} of weights and "
                        f"{format_bytes(plan.draft_kv_bytes)} of K/V for the slots; its next token is the model's at "
                        f"{100 * share:.0f}% of a sample text's positions (the share of greedy drafts taken, roughly)")
