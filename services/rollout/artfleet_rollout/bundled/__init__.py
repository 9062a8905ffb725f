"""The bundled environments' own programs, apart from the service's engine: the games'
pure logic (`calculator`, `game2048`), their MCP servers (`mcp_calculator`, `mcp_2048`:
each its own process, started per episode as `artfleet-mcp-*`) and the scripted expert
(`expert`, `artfleet-demos`). The task sets that name them are in `environments/`.

This package imports nothing: a server started per episode loads only its own game, not
the environment registry.
"""
