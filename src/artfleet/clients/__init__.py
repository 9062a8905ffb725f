"""Clients one service uses to reach another's resources: the sandbox router with session
leases (`sandbox`), MCP servers run in a sandbox (`mcp_stdio`) or as local processes
(`mcp_local`), and the budget of non-protocol output a stdio server may write (`mcp_guard`).
Built on `artfleet.runtime.rpc`; imports no service package.
"""
