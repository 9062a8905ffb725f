"""`artfleet-mcp-calculator`: the calculator environment as an MCP server (official SDK,
stdio), HUD style.

Tools: `setup(a, op1, b, op2, c, order)` poses a two-operation problem, `calculate(a, op,
b)` computes one operation, `answer(value)` gives the final answer (once), `evaluate()`
answers `{"reward": 1 or 0, "done": ...}`: 1 when the answer is right. One problem per
server process: each episode starts its own.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from artfleet_rollout.bundled.calculator import Op, Order, Problem, apply

server = MCPServer("artfleet-calculator")
_state: dict[str, Any] = {}


def _problem() -> Problem:
    problem: Problem | None = _state.get("problem")
    if problem is None:
        raise ToolError("no problem yet: call setup first")
    return problem


@server.tool()
def setup(a: int, op1: Op, b: int, op2: Op, c: int, order: Order = "left") -> str:
    """Pose a problem: (a op1 b) op2 c when order is left, a op1 (b op2 c) when right."""
    try:
        problem = Problem(a, op1, b, op2, c, order)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    _state.clear()
    _state.update(problem=problem, calculations=0)
    return "Calculator ready."


@server.tool()
def calculate(a: int, op: Op, b: int) -> str:
    """Compute a op b, where op is +, - or *. Returns the result."""
    _problem()
    try:
        result = apply(a, op, b)
    except ValueError as exc:  # the schema says so; a client may not check it
        raise ToolError(str(exc)) from None
    _state["calculations"] += 1
    return str(result)


@server.tool()
def answer(value: int) -> str:
    """Give the final answer to the problem. Only the first answer counts."""
    _problem()
    if "answer" in _state:
        raise ToolError(f"already answered {_state['answer']}")
    _state["answer"] = value
    return f"Answer recorded: {value}."


@server.tool()
def evaluate() -> dict[str, Any]:
    """The reward: 1 when the answer is right, else 0; done once answered."""
    problem = _problem()
    given = _state.get("answer")
    return {
        "reward": 1.0 if given == problem.answer() else 0.0,
        "done": given is not None,
        "answer": given,
        "calculations": _state["calculations"],
    }


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
