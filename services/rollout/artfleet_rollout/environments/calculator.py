"""`calculator`: two-operation problems solved through a calculator MCP server, one
operation per call, then the answer — at least three tool turns with observations between
them (artfleet_rollout.bundled.calculator says why a 135M model cannot skip the tool).

400 problems, 100 per form (`d1` `(a op b) op c`, `d2` in words, `d3` `a op (b op c)`,
`d4` by precedence); every fifth of a form is in the test split (80 tasks). The server's
evaluate tool scores the answer (1 right, 0 otherwise); a scripted expert
(artfleet_rollout.bundled.expert) writes demonstrations of the train split for SFT.
"""

from __future__ import annotations

from artfleet_rollout.bundled import calculator

from .base import Environment, McpTask, Scenario, ToolCallSpec

NAME = "calculator"
SERVER_COMMAND = "artfleet-mcp-calculator"
TOOLS = ("calculate", "answer")


def instruction(statement: str) -> str:
    return (
        f"Compute {statement}. Use calculate for one operation per call, "
        "then call answer with the result."
    )


def scenarios() -> list[Scenario]:
    config = {"local": {"command": SERVER_COMMAND, "args": []}}
    out = []
    for i, (scenario_id, form, problem) in enumerate(calculator.problems()):
        statement = calculator.text(problem, form)
        out.append(
            Scenario(
                id=scenario_id,
                split="test" if i % 5 == 0 else "train",
                title=statement,
                instruction=instruction(statement),
                difficulty=form,
                answer=str(problem.answer()),
                mcp=McpTask(
                    config=config,
                    evaluate=ToolCallSpec("evaluate"),
                    setup=ToolCallSpec("setup", problem.setup_arguments()),
                ),
            )
        )
    return out


def load_calculator() -> Environment:
    return Environment(
        NAME,
        "Two-operation arithmetic through a calculator MCP server (calculate, then answer)",
        scenarios(),
        agent="mcp",
        tools=TOOLS,
    )
