"""Write a small Python function; the fleet's sandbox runs its tests, the `tests` scorer
rewards them.

An ART rollout function like any other, plus the fleet's parts from
`artfleet.clients.episode`: the model's code runs only in a sandbox session of the
episode (never in the worker), `run_tests` counts the results, and `score(..., "tests")`
asks the reward service for the same verdict a job's `reward: [tests]` would give. When
tests fail, the model sees the failures and tries once more.
"""

from __future__ import annotations

import re

import art

from artfleet.clients.episode import sandbox, score
from artfleet_rollout.art_environment import ArtEnvironment

FENCED = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
SYSTEM = (
    "You write Python. Answer with one ```python code block that defines the function "
    "asked for, and nothing else."
)


def code_of(text: str) -> str:
    """The first fenced block, or the whole reply when it has none."""
    found = FENCED.search(text)
    return found.group(1) if found else text


async def rollout(model: art.Model, task: dict) -> art.Trajectory:
    """Write the function the task asks for; its tests decide the reward."""
    client = model.openai_client()
    trajectory = art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task["prompt"]},
        ],
        reward=0.0,
        metadata={"task": task["id"]},
    )
    tests = {"test_solution.py": task["tests"]}
    async with sandbox(tests, image=task.get("image", "")) as box:
        for attempt in range(task.get("attempts", 2)):
            completion = await client.chat.completions.create(
                model=model.get_inference_name(),
                messages=trajectory.messages(),
                max_completion_tokens=task.get("max_tokens", 96),
            )
            choice = completion.choices[0]
            trajectory.messages_and_choices.append(choice)
            await box.write_files({"solution.py": code_of(choice.message.content or "")})
            report = await box.run_tests(timeout_s=60)  # pytest, counted from its JUnit
            if report.total and report.passed == report.total:
                break
            if attempt + 1 < task.get("attempts", 2):
                trajectory.messages_and_choices.append(
                    {"role": "user", "content": "The tests failed:\n" + report.output[-800:]}
                )
    [verdict] = await score(trajectory, "tests")  # the reward service's tests scorer
    trajectory.reward = verdict.reward
    trajectory.metrics.update(
        tests_passed=report.passed, tests_total=report.total, attempts=attempt + 1
    )
    return trajectory


environment = ArtEnvironment(rollout, scenarios="tasks.jsonl")
