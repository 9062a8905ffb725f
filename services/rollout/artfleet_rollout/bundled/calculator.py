"""Two-operation arithmetic worked through a calculator, one operation per call.

The problems of the `calculator` environment, how each is solved (which operation first,
and where the first result goes), and the answer. Pure: the MCP server
(`artfleet-mcp-calculator`), the environment and the scripted expert all read it, so the
three agree on what a problem is and what solves it.

The numbers are two-digit and the operations include products, so a 135M model cannot
answer from memory: it must call `calculate` twice, carry the first result into the second
call (an observation read back), and `answer` — three tool turns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

OPS = ("+", "-", "*")
Op = Literal["+", "-", "*"]
Order = Literal["left", "right"]  # which operation comes first
FORMS = ("d1", "d2", "d3", "d4")
PER_FORM = 100
_SEED = 20261125
_WORDS = {"+": "add {}", "-": "subtract {}", "*": "multiply by {}"}


def apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")


@dataclass(frozen=True)
class Step:
    """One calculator call: `a op b`."""

    a: int
    op: str
    b: int


@dataclass(frozen=True)
class Problem:
    """`(a op1 b) op2 c` when `order` is left, `a op1 (b op2 c)` when right."""

    a: int
    op1: str
    b: int
    op2: str
    c: int
    order: str = "left"

    def __post_init__(self) -> None:
        if self.op1 not in OPS or self.op2 not in OPS:
            raise ValueError(f"operators must be among {', '.join(OPS)}")
        if self.order not in ("left", "right"):
            raise ValueError("order must be left or right")

    def steps(self) -> list[Step]:
        """The two calls that solve it, with the first result filled in."""
        if self.order == "left":
            first = Step(self.a, self.op1, self.b)
            return [first, Step(apply(first.a, first.op, first.b), self.op2, self.c)]
        first = Step(self.b, self.op2, self.c)
        return [first, Step(self.a, self.op1, apply(first.a, first.op, first.b))]

    def answer(self) -> int:
        last = self.steps()[-1]
        return apply(last.a, last.op, last.b)

    def setup_arguments(self) -> dict[str, int | str]:
        """The MCP server's `setup` arguments (Problem's fields)."""
        return {
            "a": self.a,
            "op1": self.op1,
            "b": self.b,
            "op2": self.op2,
            "c": self.c,
            "order": self.order,
        }


def text(problem: Problem, form: str) -> str:
    """How the task states the problem: `d1` `(a op b) op c`, `d2` in words (left first),
    `d3` `a op (b op c)`, `d4` without parentheses (the usual precedence decides)."""
    p = problem
    if form == "d1":
        return f"({p.a} {p.op1} {p.b}) {p.op2} {p.c}"
    if form == "d2":
        return f"Start with {p.a}, {_WORDS[p.op1].format(p.b)}, then {_WORDS[p.op2].format(p.c)}"
    if form == "d3":
        return f"{p.a} {p.op1} ({p.b} {p.op2} {p.c})"
    return f"{p.a} {p.op1} {p.b} {p.op2} {p.c}"


def _draw(rng: random.Random, form: str) -> Problem:
    while True:
        op1, op2 = rng.choice(OPS), rng.choice(OPS)
        a, b = rng.randint(12, 99), rng.randint(12, 99)
        c = rng.randint(3, 19) if "*" in (op1, op2) else rng.randint(12, 99)
        if form in ("d1", "d2"):
            order = "left"
        elif form == "d3":
            order = "right"
        else:  # precedence: a product after a sum or difference comes first
            order = "right" if op2 == "*" and op1 != "*" else "left"
        problem = Problem(a, op1, b, op2, c, order)
        # No negative results: every intermediate value reads as a plain number.
        if all(apply(s.a, s.op, s.b) >= 0 for s in problem.steps()):
            return problem


def problems() -> list[tuple[str, str, Problem]]:
    """(id, form, problem), fixed: PER_FORM per form, drawn from one seeded generator."""
    rng = random.Random(_SEED)
    return [(f"{form}-{i:03d}", form, _draw(rng, form)) for form in FORMS for i in range(PER_FORM)]
