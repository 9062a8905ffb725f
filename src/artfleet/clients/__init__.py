"""Clients one service uses to reach another's resources: the sandbox router with session
leases (`sandbox`), MCP servers run in a sandbox (`mcp_stdio`) or as local processes
(`mcp_local`), the budget of non-protocol output a stdio server may write (`mcp_guard`),
and tinker-cookbook's SmolLM2 renderer for users' Tinker clients (`tinker_renderers`).
Built on `artfleet.runtime.rpc`; imports no service package.
"""
