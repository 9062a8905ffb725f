"""`artfleet-mcp-2048`: the 2048 environment as an MCP server (official SDK, stdio), HUD style.

Tools: `setup(seed, target)` starts a seeded game, `move(direction)` plays and returns the
board as text, `evaluate()` answers `{"reward": [0, 1], "done": ...}` from the largest tile
relative to the target. One game per server process: each episode starts its own.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

try:
    from artfleet_rollout.bundled.game2048 import DIRECTIONS, Game
except ImportError:  # in the sandbox image (scripts/build_game2048_image.sh): a plain module
    from game2048 import DIRECTIONS, Game  # type: ignore[no-redef]

server = MCPServer("artfleet-2048")
_state: dict[str, Game] = {}


def _game() -> Game:
    game = _state.get("game")
    if game is None:
        raise ToolError("no game yet: call setup first")
    return game


@server.tool()
def setup(seed: int = 0, target: int = 64) -> str:
    """Start a new game: a seeded board and the tile to reach (a power of two)."""
    try:
        _state["game"] = Game(seed=seed, target=target)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    return _state["game"].render()


@server.tool()
def move(direction: Literal["up", "down", "left", "right"]) -> str:
    """Slide the tiles: up, down, left or right. Returns the board."""
    if direction not in DIRECTIONS:  # the schema says so; a client may not check it
        raise ToolError(f"direction must be one of: {', '.join(DIRECTIONS)}")
    game = _game()
    moved = game.move(direction)
    return game.render() if moved else f"Nothing moved.\n{game.render()}"


@server.tool()
def evaluate() -> dict[str, Any]:
    """The reward in [0, 1] (largest tile vs target, log scale) and whether the game is over."""
    game = _game()
    return {
        "reward": game.reward(),
        "done": game.max_tile >= game.target or not game.can_move(),
        "max_tile": game.max_tile,
        "moves": game.moves,
    }


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
