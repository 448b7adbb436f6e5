"""The app's parts: what ChatApp owns and routes its messages to, each given the app as a ChatHost (chat_host.py), the
one face of the app they see: its start, its saved chats, fan-outs, what chats ask of it, a switch of model, its
leaving, the palette, a reply's tool rounds, the servers' notes, and the settings it keeps for the next start."""
