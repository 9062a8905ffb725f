"""Guess the number: a multi-turn game written exactly the ART way.

The rollout keeps its own state (the secret, the guesses), talks to the model through
`model.openai_client()`, appends each choice to `messages_and_choices` and sets its own
reward. Nothing in `rollout` knows about the fleet: the same function runs in an ART
training script. The last line declares it as a fleet environment.
"""

from __future__ import annotations

import random
import re

import art
from pydantic import BaseModel

from artfleet_rollout.art_environment import ArtEnvironment

LOW, HIGH = 1, 20
NUMBER = re.compile(r"-?\d+")


class Game(BaseModel):
    id: str
    secret: int
    turns: int = 3


def games() -> tuple[list[Game], list[Game]]:
    """32 games to train on, 8 held out: the same secrets on every machine."""
    rng = random.Random(2048)
    made = [Game(id=f"guess-{i:03d}", secret=rng.randint(LOW, HIGH)) for i in range(40)]
    return made[:32], made[32:]


def first_number(text: str) -> int | None:
    found = NUMBER.search(text)
    return int(found.group()) if found else None


async def rollout(model: art.Model, game: Game) -> art.Trajectory:
    """Guess a secret number from 1 to 20; after each guess the game says higher or lower."""
    client = model.openai_client()
    trajectory = art.Trajectory(
        messages_and_choices=[
            {
                "role": "system",
                "content": f"You are playing a game. Guess the secret whole number from {LOW} "
                f"to {HIGH}. Reply with the number only.",
            },
            {"role": "user", "content": "Your first guess?"},
        ],
        reward=0.0,
        metadata={"game": game.id},
    )
    guesses: list[int] = []
    invalid = 0
    for _ in range(game.turns):
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=trajectory.messages(),
            max_completion_tokens=16,
        )
        choice = completion.choices[0]
        trajectory.messages_and_choices.append(choice)
        guess = first_number(choice.message.content or "")
        if guess is None or not LOW <= guess <= HIGH:
            invalid += 1
            reply = f"That is not a number from {LOW} to {HIGH}. Guess again."
        elif guess == game.secret:
            guesses.append(guess)
            break
        else:
            guesses.append(guess)
            reply = "Higher." if guess < game.secret else "Lower."
        trajectory.messages_and_choices.append({"role": "user", "content": reply})
    solved = bool(guesses) and guesses[-1] == game.secret
    closest = min((abs(g - game.secret) for g in guesses), default=HIGH - LOW)
    # Solved is worth 1; otherwise up to 0.5 for getting close, less for each invalid reply.
    trajectory.reward = 1.0 if solved else 0.5 * (1 - closest / (HIGH - LOW)) - 0.1 * invalid
    trajectory.metrics.update(solved=float(solved), guesses=len(guesses), invalid=invalid)
    return trajectory


environment = ArtEnvironment(rollout, scenarios=games)
