"""The installed version of a distribution (mlxchat itself, mlx), as `--version` and doctor print it."""

from __future__ import annotations

from importlib import metadata


def installed_version(distribution: str = "mlxchat") -> str:
    """`distribution`'s version, or "not installed" (e.g. run from a checkout without `pip install`)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"
