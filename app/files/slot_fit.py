"""Whether a message fits its chat's slot before it is sent, and when it does not, what would make it fit."""

from __future__ import annotations

from mlxchat.app.files.attachments import Attachment


def over_the_slot(needed: int, reserve: int, per_slot: int, total: int, files: list[Attachment],
                  trained: int | None = None) -> str | None:
    """Why a message whose conversation takes `needed` tokens (with `reserve` more for the reply) does not fit a slot
    of `per_slot` (of `total` in all), and what would: a bigger slot (F2), fewer slots, or part of a file; only what
    can be done (no slot larger than the `trained` context of the model). None where it fits."""
    over = needed + reserve - per_slot
    if over <= 0:
        return None
    want = needed + reserve
    can_grow = trained is None or want <= trained
    ways = [f"a slot of {want:,} tokens or more (F2: a bigger total context)"] if can_grow else []
    if can_grow and total // want >= 1:
        ways.append(f"at most {total // want} slot{'s' if total // want != 1 else ''} of the {total:,} tokens (F2)")
    biggest = max(files, key=lambda a: a.tokens or 0, default=None)
    if biggest is not None and biggest.tokens and biggest.tokens > over:
        part = biggest.tokens - over
        ways.append(f"about {part:,} tokens of {biggest.name} ({100 * part // biggest.tokens}% of it) instead of all")
    said = (f"this message does not fit its slot: the chat would take {needed:,} tokens and {reserve} more for the "
            f"reply, {over:,} over the slot's {per_slot:,}.")
    if not ways:  # (no slot can hold it: the model was trained on less)
        return f"{said} No slot can hold it: the model was trained on {trained:,} tokens. Start a new chat, or send less."
    return f"{said} It would fit with " + ", or ".join(ways) + "."
