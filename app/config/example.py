"""config.example.toml's text, made from the settings' field docstrings and defaults."""

from __future__ import annotations

import textwrap

from pydantic import BaseModel

from mlxchat.app.config.settings import Settings
from mlxchat.app.config.toml_text import is_table, named_tables, toml_value


def example_config() -> str:
    """The text of config.example.toml: every key, commented out, with its documentation and default."""
    lines = [
        "# mlxchat configuration.",
        "#",
        "# Copy to ~/.config/mlxchat/config.toml (or $XDG_CONFIG_HOME/mlxchat/config.toml, or name it",
        "# with --config / MLXCHAT_CONFIG) and uncomment what you want to change. Environment",
        "# variables override the file: MLXCHAT_PARALLEL=2, MLXCHAT_SAMPLING__TEMPERATURE=0.",
        "# Command-line flags override both.",
        "#",
        "# Generated from app/config/settings.py by: python -m mlxchat.app.config.example > config.example.toml",
        "",
    ]
    lines += _example_fields(Settings)
    for name, info in Settings.model_fields.items():
        if is_table(info.annotation):
            lines += [*_comment(info.description or ""), f"[{name}]", ""]
            lines += _example_fields(info.annotation)
            for sub, sub_info in info.annotation.model_fields.items():
                model = named_tables(sub_info.annotation)
                if model is not None:  # one commented example table, NAME for its name
                    lines += [*_comment(sub_info.description or ""), f"# [{name}.{sub}.NAME]", ""]
                    lines += _example_fields(model)
    return "\n".join(lines).rstrip("\n") + "\n"


def _example_fields(model: type[BaseModel]) -> list[str]:
    """The commented documentation and `# key = value` line of each scalar field of `model`."""
    lines: list[str] = []
    for name, info in model.model_fields.items():
        if is_table(info.annotation) or named_tables(info.annotation) is not None:
            continue
        value = info.examples[0] if info.examples else info.get_default(call_default_factory=True)
        if value is None:  # (unset, with nothing to show: its documentation says how it is written)
            lines += [*_comment(info.description or ""), ""]
            continue
        lines += [*_comment(info.description or ""), f"# {name} = {toml_value(value)}", ""]
    return lines


def _comment(text: str) -> list[str]:
    """`text` wrapped as TOML comment lines."""
    return ["# " + line for line in textwrap.wrap(" ".join(text.split()), width=90)]


if __name__ == "__main__":
    print(example_config(), end="")
