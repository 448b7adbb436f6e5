"""A Hub model fetched into the Hugging Face cache, its bytes reported as they come (done, total, rate, time left);
offline, or with the Hub out of reach, a ModelLoadError that says so."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mlxchat.engine.loading.hub_cache import hub_cache_dir
from mlxchat.engine.loading.progress import ModelLoadError, Progress

MB = 1e6


def offline() -> bool:
    """Whether HF_HUB_OFFLINE is set now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def byte_bar(repo_id: str, report: Callable[[Progress], None]) -> type[tqdm]:
    """A tqdm class for snapshot_download that says each update of its byte counts to `report`, and shows nothing."""

    class ByteBar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = False
            kwargs["file"] = open(os.devnull, "w")  # noqa: SIM115 (closed with the bar)
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.unit == "B" and self.total:
                elapsed = self.format_dict["elapsed"]
                rate = self.n / elapsed if elapsed > 0 else 0  # (the average since it began)
                left = f" · {(self.total - self.n) / rate:.0f} s left" if rate else ""
                report(Progress(f"Downloading {repo_id}: {self.n / MB:,.1f} of {self.total / MB:,.1f} MB"
                                f" · {rate / MB:.1f} MB/s{left}", self.n, self.total))
            return shown

        def close(self) -> None:
            super().close()
            self.fp.close()

    return ByteBar


def download(repo_id: str, report: Callable[[Progress], None]) -> Path:
    """The local snapshot of Hub model `repo_id`, downloaded unless HF_HUB_OFFLINE is set (then only the cache)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    report(Progress(f"Fetching {repo_id}", 0, 0))
    try:
        return Path(snapshot_download(repo_id, allow_patterns=DEFAULT_ALLOW_PATTERNS, local_files_only=offline(),
                                      cache_dir=hub_cache_dir(), endpoint=os.environ.get("HF_ENDPOINT") or None,
                                      tqdm_class=byte_bar(repo_id, report)))
    except RepositoryNotFoundError as e:
        raise ModelLoadError(f"{repo_id} was not found on Hugging Face (or it is private or gated).") from e
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        why = "HF_HUB_OFFLINE is set" if offline() else "this machine looks offline"
        raise ModelLoadError(
            f"{repo_id} is not downloaded yet, and Hugging Face could not be reached ({why}). "
            "A model already here (the picker lists them), a local MLX folder or a .gguf file works offline."
        ) from e
