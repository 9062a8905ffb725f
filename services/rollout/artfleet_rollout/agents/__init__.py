"""Agent kinds beyond the terminal agent: OpenAI tool calling, MCP environments,
single-turn prompts."""
