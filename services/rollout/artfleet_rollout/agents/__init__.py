"""The agents: the terminal agent (`terminal/`), and the kinds beyond it (`kinds.py`):
OpenAI tool calling, MCP environments, single-turn prompts."""
