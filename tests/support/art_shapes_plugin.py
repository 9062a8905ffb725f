"""A plugin package of ART rollout functions in each shape ART's examples write (the
source of a package the tests `pip install`), rollouts that outgrow their budget, and
signatures the fleet cannot call. The tiny policy's vocabulary is `w<ii>` words
(tests/support/tiny_server.py), so the prompts are made of them: one word, one token."""

PLUGIN = '''
import random

import art
from artfleet.clients.episode import rollout_context
from artfleet_rollout.art_environment import ArtEnvironment

ATTEMPTS = {}  # rollout function -> times it was started (a retry would start it again)


def _start(text):
    return art.Trajectory(messages_and_choices=[{"role": "user", "content": text}], reward=0.0)


async def _ask(model, trajectory, **limits):
    client = model.openai_client()
    completion = await client.chat.completions.create(
        model=model.get_inference_name(), messages=trajectory.messages(), **limits
    )
    choice = completion.choices[0]
    trajectory.messages_and_choices.append(choice)
    return choice


async def _once(model, name, **bound):
    """One turn; the trajectory records what the function got and what the context says."""
    ATTEMPTS[name] = ATTEMPTS.get(name, 0) + 1
    ctx = rollout_context()
    trajectory = _start(f"w{random.Random(ctx.seed).randrange(10, 60)} w11")
    await _ask(model, trajectory)
    trajectory.metadata.update({f"got_{key}": value for key, value in bound.items()})
    trajectory.metadata.update(
        ctx_step=ctx.step, ctx_split=ctx.split, ctx_validation=ctx.is_validation,
        ctx_index=ctx.rollout_index, ctx_scenario=ctx.scenario_id,
    )
    trajectory.reward = 1.0
    return trajectory


async def by_scenario(model: art.Model, puzzle: dict) -> art.Trajectory:
    """A scenario under its own name, as ART's temporal-clue example."""
    return await _once(model, "by_scenario", scenario=puzzle["id"])


@art.retry(exceptions=(ValueError,))
async def draws_own(
    model: art.Model, step: int, is_validation: bool, verbose: bool = False
) -> art.Trajectory:
    """ART's 2048 shape: draws its own task."""
    return await _once(model, "draws_own", step=step, is_validation=is_validation)


async def step_only(model, step):
    return await _once(model, "step_only", step=step)


async def model_only(model):
    return await _once(model, "model_only")


async def keywords(model, *, step, is_validation):
    return await _once(model, "keywords", step=step, is_validation=is_validation)


async def positional(model, step, /):
    return await _once(model, "positional", step=step)


@art.retry()  # retries any Exception: the budget's stop must not be one
async def plays_forever(model: art.Model, step: int, is_validation: bool) -> art.Trajectory:
    """Moves until the game is over; it never is (ART's 2048 loop, a game without end)."""
    ATTEMPTS["plays_forever"] = ATTEMPTS.get("plays_forever", 0) + 1
    trajectory = _start("w12 w13")
    while True:
        try:
            await _ask(model, trajectory, max_completion_tokens=4)
        except Exception:  # an example's own error handling: not for the budget's stop
            trajectory.reward = -1.0
            return trajectory
        trajectory.messages_and_choices.append({"role": "user", "content": "w14"})


def _grows(words):
    async def rollout(model, step, is_validation):
        """Each turn a long observation: the history outgrows the context."""
        trajectory = _start("w12 w13")
        for _ in range(50):
            await _ask(model, trajectory, max_completion_tokens=8)
            trajectory.messages_and_choices.append(
                {"role": "user", "content": " ".join(["w15"] * words)}
            )
        trajectory.reward = 1.0
        return trajectory

    return rollout


def _asks(**limits):
    async def rollout(model):
        trajectory = _start("w12 w13")
        await _ask(model, trajectory, **limits)
        trajectory.reward = 1.0
        return trajectory

    return rollout


async def wants_config(model: art.Model, step: int, config: dict) -> art.Trajectory:
    raise AssertionError("never called")


async def wants_puzzle(model, scenario):
    raise AssertionError("never called")


PUZZLES = [{"id": "p1"}, {"id": "p2", "split": "test"}]
scenario_shape = ArtEnvironment(by_scenario, scenarios=PUZZLES)
own_task = ArtEnvironment(draws_own, tasks=3, eval_tasks=2)
step_shape = ArtEnvironment(step_only)
model_shape = ArtEnvironment(model_only)
keyword_shape = ArtEnvironment(keywords)
positional_shape = ArtEnvironment(positional)
endless = ArtEnvironment(plays_forever)
outgrows = ArtEnvironment(_grows(60))
outgrows_budget = ArtEnvironment(_grows(10))
asks_three = ArtEnvironment(_asks(max_completion_tokens=3))
asks_more = ArtEnvironment(_asks(max_tokens=500))
config_shape = ArtEnvironment(wants_config)
puzzle_without_scenarios = ArtEnvironment(wants_puzzle)
'''

ENVIRONMENTS = (
    "scenario_shape",
    "own_task",
    "step_shape",
    "model_shape",
    "keyword_shape",
    "positional_shape",
    "endless",
    "outgrows",
    "outgrows_budget",
    "asks_three",
    "asks_more",
    "config_shape",
    "puzzle_without_scenarios",
)
ENTRY_POINTS = '[project.entry-points."artfleet.environments"]\n' + "".join(
    f'{n.replace("_", "-")} = "artfleet_test_shapes:{n}"\n' for n in ENVIRONMENTS
)
