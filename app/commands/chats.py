"""`mlxchat chats` lists the saved chats; `mlxchat export ID` prints one."""

from __future__ import annotations

import argparse
import sys

from mlxchat.app.chats.export import export_chat
from mlxchat.app.chats.errors import StoreError
from mlxchat.app.chats.chat import local_time
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.exit_codes import EXIT_FAILURE, EXIT_USAGE


def run_chats_command(args: argparse.Namespace) -> int:
    """`mlxchat chats` lists the saved chats; `mlxchat export ID` prints one."""
    try:
        store = ChatStore.open_existing()
    except StoreError as exc:
        print(f"mlxchat: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        if args.command == "chats":
            for chat in store.list_chats(args.search):
                state = "open" if chat.open else "    "
                print(f"{chat.id:>5}  {local_time(chat.updated)}  {chat.messages:>4} messages  {state}  {chat.title}")
            return 0
        chat = store.load(args.chat_id)
        if chat is None:
            print(f"mlxchat: there is no chat {args.chat_id} (`mlxchat chats` lists the saved ones)", file=sys.stderr)
            return EXIT_USAGE
        sys.stdout.write(export_chat(chat, args.format))
        return 0
    finally:
        store.close()
