"""Imports point down: the session never reaches into the UI, widgets never into screens, screens never into the app."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


def imports_of(folder: str) -> list[tuple[str, str]]:
    """(module file, imported module) for every mlxchat import in `folder`, lazy ones included."""
    found = []
    for path in sorted((Path(__file__).parents[2] / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append((path.name, node.module))
            elif isinstance(node, ast.Import):
                found += [(path.name, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("app/session", "mlxchat.app.ui"),
        ("app/ui/widgets", "mlxchat.app.ui.screens"),
        ("app/ui/widgets", "mlxchat.app.ui.app"),
        ("app/ui/screens", "mlxchat.app.ui.app"),
    ],
)
def test_imports_point_down(folder: str, forbidden: str) -> None:
    wrong = [(name, module) for name, module in imports_of(folder) if module.startswith(forbidden)]
    assert not wrong, f"{folder} must not import {forbidden}: {wrong}"
