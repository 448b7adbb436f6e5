"""A saved chat as Markdown (to read) or JSON (to process), for `mlxchat export` and the app."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from mlxchat.app.chats.chat import Chat, ChatMessage, reasoning_header
from mlxchat.app.files.attachments import Attachment

ExportFormat = Literal["md", "json"]
FORMATS: tuple[ExportFormat, ...] = ("md", "json")
JSON_FORMAT_VERSION = 1

# Why a reply ended, as a line under it; a reply that simply stopped gets none.
_ENDINGS = {
    "cancelled": "(stopped)",
    "length": "(cut at max_tokens)",
    "context": "(reached the end of its slot's context)",
    "error": "(ended by an error)",
}


def export_chat(chat: Chat, fmt: ExportFormat) -> str:
    """The chat in format `fmt`."""
    return to_json(chat) if fmt == "json" else to_markdown(chat)


def to_markdown(chat: Chat) -> str:
    """The chat as a Markdown document: a heading, its settings, then one section per turn."""
    s = chat.sampling
    seed = "none" if s.seed is None else str(s.seed)
    lines = [
        f"# {chat.title or f'Chat {chat.id}'}",
        "",
        f"- chat {chat.id} · model {chat.model or '(unknown)'}",
        f"- created {chat.created} · updated {chat.updated}",
        f"- temperature {s.temperature:g} · top_p {s.top_p:g} · top_k {s.top_k} · max_tokens {s.max_tokens}"
        f" · seed {seed}" + ("" if s.thinking else " · thinking off")
        + ("" if s.reasoning_budget is None else f" · reasoning_budget {s.reasoning_budget}")
        + ("" if s.speculative == "off" else f" · speculative {s.speculative}"),
        "",
    ]
    if chat.system_prompt:
        lines += ["## System", "", chat.system_prompt, ""]
    for message in chat.messages:
        lines += [f"## {message.role.capitalize()}", ""]
        if message.reasoning:  # folded, as the app shows it once the answer has started
            lines += ["<details>", f"<summary>{reasoning_header(message)}</summary>", "", message.reasoning, "",
                      "</details>", ""]
        lines += [message.text, ""]
        for record in message.attachments:  # each file as it was sent: name, size, when, content
            attached = Attachment.from_record(record)
            if attached.is_image:  # its copy in the data folder, named by its bytes' SHA-256
                lines += [f"**Attached image** `{attached.name}` ({attached.width}×{attached.height} · {attached.sizes}, "
                          f"{attached.attached})", "", f"![{attached.name}]({Path(attached.path).as_uri()})", ""]
                continue
            lines += [f"**Attached** `{attached.name}` ({attached.sizes}, {attached.attached})", "", attached.block(), ""]
        for call in message.tool_calls:  # each call, then its result, as a quoted block
            arguments = json.dumps(call["arguments"], ensure_ascii=False)
            lines += [f"**Tool call** `{call['name']}` ({call.get('server') or 'no server'}): `{arguments}`", ""]
            lines += ["> " + line for line in (call.get("result") or "(no result)").splitlines()] + [""]
        ending = _ENDINGS.get(message.finish_reason or "")
        if ending:
            lines += [f"*{ending}*", ""]
        if message.model:
            lines += [f"*written by {message.model}*", ""]
    return "\n".join(lines)


def to_json(chat: Chat) -> str:
    """The chat as a JSON document (format "mlxchat-chat", versioned), messages in order."""
    sampling = asdict(chat.sampling)
    sampling.pop("ignore_eos")  # a benchmark switch, not a chat setting
    document = {
        "format": "mlxchat-chat",
        "version": JSON_FORMAT_VERSION,
        "id": chat.id,
        "title": chat.title,
        "model": chat.model,
        "created": chat.created,
        "updated": chat.updated,
        "system_prompt": chat.system_prompt,
        "sampling": sampling,
        "messages": [message for m in chat.messages for message in _shapes(m)],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def _shapes(m: ChatMessage) -> list[dict]:
    """A message as JSON, in OpenAI's shapes: a reply's calls in `tool_calls`, each result a `tool` message after it."""
    message: dict = {
        "role": m.role,
        "content": m.text,
        "reasoning": m.reasoning,
        "reasoning_tokens": m.reasoning_tokens,
        "reasoning_ms": m.reasoning_ms,
        "finish_reason": m.finish_reason,
        "prompt_tokens": m.prompt_tokens,
        "cached_tokens": m.cached_tokens,
        "cached_from": m.cached_from,
        "ttft_ms": m.ttft_ms,
        "decode_tok_s": m.decode_tok_s,
        "drafted_tokens": m.drafted_tokens,
        "accepted_tokens": m.accepted_tokens,
        "generated_tokens": m.generated_tokens,
        "created": m.created,
        "updated": m.updated,
    }
    if m.role == "user":
        message["attachments"] = m.attachments
    else:
        message["model"] = m.model
    if not m.tool_calls:
        return [message]
    message["tool_calls"] = [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
        for c in m.tool_calls
    ]
    results = [{"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": c.get("result", ""),
                "server": c.get("server"), "error": c.get("error", False), "ms": c.get("ms")} for c in m.tool_calls]
    return [message, *results]
