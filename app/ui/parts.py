"""Bases for the mixins that split ChatApp and ChatPane by responsibility: to a type checker each is the class
it is part of (so its attributes are known), at run time a plain object."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlxchat.app.ui.app import ChatApp as AppPart
    from mlxchat.app.ui.widgets.chat_pane import ChatPane as PanePart
else:
    AppPart = PanePart = object

__all__ = ["AppPart", "PanePart"]
