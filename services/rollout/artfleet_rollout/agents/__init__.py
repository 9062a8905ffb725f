"""The agents: the kinds by name (`kinds/`: the bundled terminal, tools, mcp and single
kinds, a module each, and the kinds plugins add), what a kind's runner receives
(`context.py`), and what the kinds share (the terminal protocol in `terminal/`, the
OpenAI tool-calling loop, MCP sessions, sandbox tools)."""
