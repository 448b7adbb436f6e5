"""The files the attachment picker offers: those under a folder, less what its .gitignore files ignore."""

from __future__ import annotations

import os
from pathlib import Path

from pathspec import GitIgnoreSpec

MAX_FILES = 5000  # a picker over a home folder stops listing here: typing narrows it, a path goes straight there
SKIPPED = {".git", ".hg", ".svn"}


def _ignores(folder: Path) -> GitIgnoreSpec | None:
    """The patterns of `folder`'s own .gitignore, if it has one."""
    try:
        return GitIgnoreSpec.from_lines((folder / ".gitignore").read_text(errors="replace").splitlines())
    except OSError:
        return None


def files_under(root: Path, limit: int = MAX_FILES) -> list[str]:
    """The files under `root`, as paths relative to it (a folder's files before its subfolders', each sorted), skipping what each folder's
    .gitignore ignores (git's rules: a nested .gitignore applies under its folder) and version control folders;
    at most `limit`."""
    found: list[str] = []
    rules: dict[Path, GitIgnoreSpec] = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if (spec := _ignores(here)) is not None:
            rules[here] = spec

        def ignored(name: str, is_dir: bool) -> bool:
            """As git decides: the last pattern that matches, a deeper .gitignore's after its parents'."""
            path, verdict = here / name, False
            for base, spec in rules.items():  # (shallow first: os.walk goes down)
                if base == here or base in path.parents:
                    relative = path.relative_to(base).as_posix() + ("/" if is_dir else "")
                    include = spec.check_file(relative).include
                    verdict = verdict if include is None else include
            return verdict

        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not ignored(d, True))
        for name in sorted(files):
            if not ignored(name, False):
                found.append((here / name).relative_to(root).as_posix())
                if len(found) >= limit:
                    return found
    return found
