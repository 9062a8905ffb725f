"""`math-single`: arithmetic and word problems, generated deterministically, by difficulty.

240 problems, 48 per difficulty: `d1` one-digit addition, `d2` two-digit addition, `d3`
one-digit multiplication, `d4` one-step word problems, `d5` two-operation expressions.
Each has its answer (an integer) for the answer_check scorer (numeric mode). The base
SmolLM2-135M solves some d1-d2 problems and few of the rest (see docs/environments.md,
"Base rates"), so GRPO sees reward variance without the task being solved already.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .base import Environment, Scenario

NAME = "math-single"
PER_DIFFICULTY = 48
SYSTEM_PROMPT = "Solve the problem. Reply with the final answer as a number."
_SEED = 20261123

_NAMES = ("Tom", "Ana", "Li", "Sam", "Mia", "Omar", "Zoe", "Ben")
_ITEMS = ("apples", "books", "coins", "stamps", "pencils", "cards")


def _d1(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} + {b}?", a + b


def _d2(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"What is {a} + {b}?", a + b


def _d3(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"What is {a} * {b}?", a * b


def _d4(rng: random.Random) -> tuple[str, int]:
    who, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b = rng.randint(5, 30), rng.randint(2, 15)
    if rng.random() < 0.5:
        return f"{who} has {a} {item} and gets {b} more. How many {item} does {who} have?", a + b
    a += b
    return f"{who} has {a} {item} and gives away {b}. How many {item} are left?", a - b


def _d5(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(2, 20), rng.randint(2, 9), rng.randint(2, 9)
    return f"What is {a} + {b} * {c}?", a + b * c


GENERATORS: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "d1": _d1,
    "d2": _d2,
    "d3": _d3,
    "d4": _d4,
    "d5": _d5,
}


def problems() -> list[Scenario]:
    """The fixed problem list; every fifth problem of a difficulty is in the test split."""
    rng = random.Random(_SEED)
    scenarios = []
    for difficulty, generate in GENERATORS.items():
        for i in range(PER_DIFFICULTY):
            question, answer = generate(rng)
            scenarios.append(
                Scenario(
                    id=f"{difficulty}-{i:03d}",
                    split="test" if i % 5 == 0 else "train",
                    title=question,
                    instruction=question,
                    system=SYSTEM_PROMPT,
                    answer=str(answer),
                    difficulty=difficulty,
                )
            )
    return scenarios


def load_math_single() -> Environment:
    return Environment(
        NAME,
        "Single-turn arithmetic and word problems by difficulty (d1-d5), numeric answers",
        problems(),
        agent="single",
    )
