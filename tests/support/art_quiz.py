"""An ART rollout function written as an ART example writes it (its own messages, the
client from the model, each choice appended, its own reward), and broken variants: the
source of a test plugin package (plugin_dist.install_plugin), for the unit tests of the
`art` kind and its real-model test."""

PLUGIN = '''
import asyncio
import art
from artfleet.clients.episode import sandbox, score
from artfleet_rollout.art_environment import ArtEnvironment

QUIZ = [
    {"id": "one-plus-one", "question": "1+1?", "answer": "2"},
    {"id": "two-plus-two", "question": "2+2?", "answer": "4", "split": "test"},
]


async def rollout(model: art.Model, scenario: dict) -> art.Trajectory:
    """Arithmetic, asked twice."""
    client = model.openai_client()
    trajectory = art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": scenario["question"]},
        ],
        reward=0.0,
    )
    for _ in range(2):
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=trajectory.messages(),
            max_completion_tokens=32,
            temperature=1.0,
        )
        choice = completion.choices[0]
        trajectory.messages_and_choices.append(choice)
        trajectory.messages_and_choices.append({"role": "user", "content": "Sure?"})
    trajectory.messages_and_choices.pop()
    trajectory.reward = 1.0 if scenario["answer"] in (choice.message.content or "") else 0.0
    trajectory.metrics["asked"] = 2
    trajectory.metadata["quiz"] = scenario["id"]
    return trajectory


async def returns_text(model, scenario):
    return "a string"


async def samples_nothing(model, scenario):
    return art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=1.0)


async def names_another_model(model, scenario):
    await model.openai_client().chat.completions.create(model="gpt-4o", messages=[])


async def never_returns(model, scenario):
    await asyncio.Event().wait()


async def raises(model, scenario):
    raise KeyError("answer")


async def checks_in_a_sandbox(model, scenario):
    """The answer is checked by a command in a sandbox of the episode."""
    trajectory = await rollout(model, scenario)
    answer = trajectory.messages_and_choices[-1].message.content or ""
    async with sandbox({"answer.txt": answer}) as box:
        result = await box.exec("grep -q " + scenario["answer"] + " answer.txt", timeout_s=10)
    trajectory.reward = 1.0 if result.exit_code == 0 else 0.0
    return trajectory


async def hangs_in_a_sandbox(model, scenario):
    async with sandbox({"a.txt": "x"}):
        await asyncio.Event().wait()


async def tested_and_scored(model, scenario):
    """Tests run in a sandbox of the episode, then the `tests` scorer's verdict."""
    trajectory = await rollout(model, scenario)
    async with sandbox({"test_answer.py": "def test_it():\\n    assert True\\n"}) as box:
        report = await box.run_tests("pytest -q", timeout_s=60)
    judge = {"name": "judge", "weight": 0.5, "params": {"judge": "policy"}}
    [verdict] = await score(trajectory, "tests", judge)
    trajectory.reward = verdict.reward
    trajectory.metrics["tests_passed"] = report.passed
    trajectory.logs.extend(verdict.logs)
    return trajectory


async def scores_with_nothing(model, scenario):
    trajectory = await rollout(model, scenario)
    await score(trajectory)
    return trajectory


quiz = ArtEnvironment(rollout, scenarios=QUIZ)
tested = ArtEnvironment(tested_and_scored, scenarios=QUIZ)
scores_nothing = ArtEnvironment(scores_with_nothing, scenarios=QUIZ)
checked = ArtEnvironment(checks_in_a_sandbox, scenarios=QUIZ)
sandbox_hangs = ArtEnvironment(hangs_in_a_sandbox, scenarios=QUIZ)
quiz_file = ArtEnvironment(rollout, scenarios="quiz.jsonl", description="from a file")
quiz_splits = ArtEnvironment(rollout, scenarios=lambda: ([QUIZ[0]], [QUIZ[1]]))
bad_return = ArtEnvironment(returns_text, scenarios=QUIZ)
no_choice = ArtEnvironment(samples_nothing, scenarios=QUIZ)
wrong_model = ArtEnvironment(names_another_model, scenarios=QUIZ)
hangs = ArtEnvironment(never_returns, scenarios=QUIZ)
crashes = ArtEnvironment(raises, scenarios=QUIZ)
'''
