"""Which images a job needs (its split narrowed like the runner narrows it, plus its eval
split) and why the trainer refuses it."""

from __future__ import annotations

from artfleet.specs.job import validate_spec
from artfleet.v1 import rollout_pb2, sandbox_pb2
from artfleet_trainer.jobs import scheduling
from artfleet_trainer.jobs.images import job_images, refusal


def info() -> rollout_pb2.EnvironmentInfo:
    scenarios = [
        rollout_pb2.ScenarioInfo(id=f"t{i}", split="train", image=f"img/train:{i}")
        for i in range(6)
    ]
    scenarios += [
        rollout_pb2.ScenarioInfo(id="e0", split="test", image="img/test:0"),
        rollout_pb2.ScenarioInfo(id="plain", split="train"),  # no image: the default
    ]
    return rollout_pb2.EnvironmentInfo(name="r2e:x", scenarios=scenarios)


def test_the_job_split_narrowed_by_dataset_size() -> None:
    spec = validate_spec({"environment": "r2e:x", "dataset_size": 2, "seed": 7})
    ids = scheduling.dataset(["plain", *(f"t{i}" for i in range(6))], 7, 2)
    expected = sorted(f"img/train:{i[1:]}" for i in ids if i != "plain")
    assert job_images(info(), spec) == expected
    every = validate_spec({"environment": "r2e:x"})
    assert job_images(info(), every) == [f"img/train:{i}" for i in range(6)]


def test_the_eval_split_counts_when_the_job_evaluates() -> None:
    spec = validate_spec({"environment": "r2e:x", "eval_every_steps": 1, "eval_split": "test"})
    assert "img/test:0" in job_images(info(), spec)


def test_refusals_name_the_images_and_the_way_out() -> None:
    docker = sandbox_pb2.ImageCheckResponse(
        missing=["a:1", "b:2"], backend="docker", runs_images=True
    )
    text = refusal(docker)
    assert "2 image(s)" in text and "a:1, b:2" in text and "ARTFLEET_PULL_IMAGES" in text
    docker.pull_allowed = True
    assert refusal(docker) == ""
    local = sandbox_pb2.ImageCheckResponse(missing=["a:1"], backend="local", runs_images=False)
    assert "local backend" in refusal(local) and "a:1" in refusal(local)
    many = sandbox_pb2.ImageCheckResponse(
        missing=[f"i:{n}" for n in range(25)], backend="docker", runs_images=True
    )
    assert "and 5 more" in refusal(many) and "i:24" not in refusal(many)
    assert refusal(sandbox_pb2.ImageCheckResponse(backend="docker", runs_images=True)) == ""
