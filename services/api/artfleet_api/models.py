"""The HTTP bodies: the HTTP training API's request fields as it spells them, and our
responses. Every model and field is documented here (it is what /openapi.json shows)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from artfleet.specs.base import default_of, field_of
from artfleet.specs.job import DEFAULT_BASE_MODEL, NAME_PATTERN, Finetune, JobSpecModel

SLUG = NAME_PATTERN
Scalar = float | int | str | bool | None


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _spec(name: str, **changes: Any) -> Any:
    """A job spec field as this body declares it: bounds and default from JobSpecModel."""
    return field_of(JobSpecModel, name, **changes)


# A step's trajectories with the job spec's default shape (2 groups of 4 = 8).
DEFAULT_BATCH_SIZE = default_of(JobSpecModel, "groups_per_step") * default_of(
    JobSpecModel, "rollouts_per_group"
)


class TrainRequest(Body):
    """The HTTP training API's `POST /train` body. `batch_size` trajectories per step become
    `ceil(batch_size / rollouts_per_group)` groups of `rollouts_per_group` rollouts
    (default `min(4, batch_size)`); `use_ruler` + `judge_model` add a RULER scorer. The
    fields that are job spec fields (under that API's names or ours) take the job spec's
    bounds and defaults: one default per value, whichever front end submits."""

    model_name: str = Field(pattern=SLUG, description="the model's name (job spec `name`)")
    project: str = Field(pattern=SLUG, description="the project the model belongs to")
    base_model: str = Field(default=DEFAULT_BASE_MODEL, min_length=1, max_length=512)
    num_steps: int = _spec("steps", description="training steps (job spec `steps`)")
    batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE, ge=2, le=65_536, description="trajectories per step"
    )
    learning_rate: float = _spec("learning_rate")
    use_ruler: bool = Field(default=True, description="score groups with RULER")
    judge_model: str = Field(default="gpt-4o", min_length=1, max_length=256)
    task_prompt: str = _spec("task_prompt", description="the system prompt")
    environment: str | None = Field(default=None, description="default: the API's")
    rollouts_per_group: int | None = _spec("rollouts_per_group", default=None)
    max_turns: int | None = _spec("max_turns", default=None)
    max_tokens: int | None = _spec("max_tokens", default=None)
    enable_thinking: bool | None = _spec("enable_thinking")
    finetune: Finetune = _spec("finetune")


# The two forms of a `POST /train` body, as the tags of their union: request validation
# leaves a tag out of the field it names (`spec.steps`, not `JobSubmit.spec.steps`).
TRAIN_BODY_TAGS = ("TrainRequest", "JobSubmit")


class JobSubmit(Body):
    """The full job spec (as `artfleet jobs submit` takes it), instead of the HTTP training
    API's fields."""

    spec: JobSpecModel


class MismatchOut(BaseModel):
    """The sampler's logprobs against the trainer's over a step's trained tokens (with
    r = trainer - sampler logprob per token; the ratio exp(r) is the loss's importance
    ratio)."""

    engine: str = Field(description="what sampled the trajectories: vllm or torch")
    tokens: int = Field(description="trained tokens that carried a sampler logprob")
    abs_delta_mean: float = Field(description="mean |r|")
    abs_delta_p99: float = Field(description="p99 of |r|")
    k3: float = Field(description="mean(exp(r) - 1 - r): KL(sampler || trainer) per token")
    ratio_p1: float
    ratio_p50: float
    ratio_p99: float
    outside_0_9_1_1: float = Field(description="share of tokens with a ratio outside [0.9, 1.1]")
    outside_0_5_2: float = Field(description="share of tokens with a ratio outside [0.5, 2.0]")
    warning: str = Field(default="", description="set when the step is past a bound")


class StepOut(BaseModel):
    """One finished training step."""

    step: int
    reward_mean: float
    reward_std: float
    turns_mean: float
    step_seconds: float
    trajectories: int
    groups: int
    loss: float
    trained_sequences: int
    rollout_seconds: float
    train_seconds: float
    scorer_errors: int = Field(
        default=0, description="groups of the step whose reward scorers errored"
    )
    scorer_error: str = Field(default="", description='the first error: "scorer: type: message"')
    scoring_failed: bool = Field(
        default=False,
        description="every group of the step was zeroed or dropped by scorer errors",
    )
    policy_wait_seconds: float = Field(
        default=0.0,
        description="the step waited this long for the policy endpoint to serve (an outage)",
    )
    episode_failures: dict[str, int] = Field(
        default_factory=dict, description="failed episodes by exception type"
    )
    episodes_failed: int = Field(default=0, description="failed episodes of the step")
    episodes: int = Field(default=0, description="episodes the step asked for")
    failure_warning: str = Field(
        default="",
        description="set when more than the trainer's share of the episodes failed: "
        "how many, by type, and the first failure with where the user's code raised it",
    )
    mismatch: MismatchOut | None = Field(
        default=None,
        description="sampler/trainer logprob mismatch; null when not measured (no sampler "
        "logprobs, nothing trained, or the art backend); its policy lag: staleness_*",
    )
    staleness_mean: float = Field(
        default=0.0,
        description="policy lag of the trained trajectories: versions between the policy that "
        "sampled one and the model trained on it, their mean",
    )
    staleness_max: int = Field(default=0, description="... and their most")


class EvalOut(BaseModel):
    """One evaluation inside a job (eval_every_steps): the policy of `step` on `split`."""

    step: int = Field(description="the evaluated policy's step (0 = before training)")
    split: str
    k: int = Field(description="samples per task")
    tasks: int
    reward_mean: float
    success_rate: float
    avg_at_k: float
    pass_at_k: float = Field(description="mean over tasks of the unbiased pass@k estimator")


class SftOut(BaseModel):
    """An SFT warm-start batch trained (or, `done`, the phase finished) before step 1."""

    epoch: int
    epochs: int
    batch: int
    batches: int
    loss: float | None = Field(description="mean cross-entropy per assistant token")
    learning_rate: float
    done: bool
    checkpoint_step: int = Field(description="done: the checkpoint the SFT adapter was saved as")
    epoch_losses: list[float] = Field(description="done: mean batch loss per epoch")


JobState = Literal[
    "unspecified", "queued", "running", "succeeded", "failed", "cancelling", "cancelled"
]


class ResumeOut(BaseModel):
    """A resume of the job (`POST /jobs/{id}/resume`): what it was when taken up again."""

    time: str | None
    state: JobState = Field(description="`failed` or `cancelled`")
    error: str = Field(description="the reason it had failed, as it was")
    completed_steps: int = Field(description="it went on after this step (its checkpoint)")


class CheckpointOut(BaseModel):
    """A checkpoint of the job that exists on the trainer's disk (retention deletes some)."""

    step: int = Field(description="the checkpoint's step: the policy `name@step` serves it")
    policy: str = Field(description="name@step")
    training_step: int | None = Field(
        description="the training step that saved it (its StepOut); null: saved before "
        "step 1 (step 0: the initial adapter; else an SFT phase's adapter)"
    )
    best: bool = Field(description="the best by the job's keep_best_metric")


class JobOut(BaseModel):
    """A training job as the trainer reports it."""

    id: str
    state: JobState
    project: str
    model_name: str
    experiment: str = Field(description="the job's experiment (job spec `experiment`)")
    completed_steps: int
    total_steps: int
    latest_reward: float | None = Field(description="reward_mean of the last step")
    error: str
    trained_nothing: bool = Field(
        default=False,
        description="succeeded, but no step trained a sequence (every group's rewards were "
        "equal: no reward signal); its checkpoints are the starting policy",
    )
    policy: str = Field(description="name@step the trainer serves now ('' before step 1)")
    created_at: str | None
    updated_at: str | None
    steps: list[StepOut]
    evals: list[EvalOut] = Field(default_factory=list, description="in-training evals")
    resumes: list[ResumeOut] = Field(
        default_factory=list, description="each resume of the job, oldest first"
    )
    spec: dict[str, Any] = Field(description="the job spec the trainer runs")
    checkpoints: list[CheckpointOut] | None = Field(
        default=None,
        description="GET /jobs/{job_id} only: the checkpoints on the trainer's disk, oldest "
        "first (null in listings, or when the trainer did not list them)",
    )


class JobList(BaseModel):
    jobs: list[JobOut]


class TrainResponse(BaseModel):
    """What `POST /train` started (or, sent again with its `Idempotency-Key`, had started)."""

    job_id: str
    state: JobState
    project: str
    model_name: str
    status_url: str = Field(description="this job: `/jobs/{job_id}`")
    stream_url: str = Field(description="this job's progress: `/jobs/{job_id}/stream`")
    job: JobOut


class EventOut(BaseModel):
    """One progress event (the SSE `data:` of `/stream`; `id:` is `seq`)."""

    seq: int
    kind: Literal["unspecified", "state", "step_started", "step_done", "log", "eval", "sft"]
    state: JobState
    step: int
    total_steps: int
    time: str | None
    message: str
    summary: StepOut | None
    eval: EvalOut | None = None
    sft: SftOut | None = None


class RolloutRequest(Body):
    """The HTTP training API's `POST /rollout`: one group of `num_rollouts` episodes, no
    training. The policy is the model's current checkpoint on the fleet, or `model` at
    `base_url`."""

    model_name: str = Field(pattern=SLUG)
    project: str = Field(pattern=SLUG)
    num_rollouts: int = Field(default=4, ge=1, le=64)
    task_prompt: str = Field(default="", max_length=32_768)
    temperature: float = Field(default=0.7, ge=0, le=2.0)
    environment: str | None = Field(default=None, description="default: the API's")
    scenario_id: str | None = Field(default=None, description="default: the first of `train`")
    max_turns: int = Field(default=2, ge=1, le=50)
    max_tokens: int = Field(default=96, ge=1, le=8192)
    base_url: str | None = Field(
        default=None, pattern=r"^https?://", description="any OpenAI-compatible endpoint"
    )
    model: str | None = Field(default=None, min_length=1, description="model at base_url")
    api_key_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="key variable (rollout)"
    )
    seed: int = Field(default=0, ge=0, le=2**62)
    enable_thinking: bool | None = _spec("enable_thinking")


class TrajectoryOut(BaseModel):
    """A trajectory, in the shape the console reads (and trajectory files use)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    reward: float = 0.0
    metrics: dict[str, Scalar] = Field(default_factory=dict)
    metadata: dict[str, Scalar] = Field(default_factory=dict)


class ScorerFailureOut(BaseModel):
    scorer: str
    type: str
    message: str
    trajectory: int
    action: str


class OutcomeOut(BaseModel):
    """What the reward service's failure policies decided for the group."""

    dropped: list[int]
    group_dropped: bool
    fail_job: str
    failures: list[ScorerFailureOut]


class RolloutResponse(BaseModel):
    model: str = Field(description="the model the episodes were sampled from")
    base_url: str
    environment: str
    scenario_id: str
    trajectories: list[TrajectoryOut]
    errors: list[str] = Field(description="episodes that failed")
    outcome: OutcomeOut
    notes: list[str] = Field(description="what of the request could not be applied")


class EvalTrajectory(Body):
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=1000)
    tools: list[dict[str, Any]] | None = None
    reward: float = 0.0


class EvaluateRequest(Body):
    """The HTTP training API's `POST /evaluate`: the judge scores each trajectory on its own; with
    `use_ruler`, RULER ranks them as one group."""

    trajectories: list[EvalTrajectory] = Field(min_length=1, max_length=64)
    judge_model: str = Field(default="gpt-4o", min_length=1, max_length=256)
    evaluation_prompt: str | None = Field(default=None, min_length=1, max_length=32_768)
    use_ruler: bool = False
    project: str | None = Field(default=None, pattern=SLUG, description="policy judge's model")
    model_name: str | None = Field(default=None, pattern=SLUG)


class ScoreOut(BaseModel):
    reward: float
    components: dict[str, float]
    dropped: bool
    metrics: dict[str, float]
    independent_reward: float | None
    logs: list[str]


class EvaluateResponse(BaseModel):
    judge: str = Field(description="the judge the reward service called")
    policy: str | None = Field(
        default=None,
        description="the policy judge's checkpoint (name@step), chosen for this evaluation",
    )
    scores: list[ScoreOut]
    outcome: OutcomeOut


class ModelOut(BaseModel):
    """A trained model, derived from its jobs (the trainer has no model registry RPC)."""

    project: str
    model_name: str
    base_model: str
    jobs: int
    latest_job_id: str
    state: JobState
    completed_steps: int
    policy: str


class ModelList(BaseModel):
    models: list[ModelOut]


class DependencyOut(BaseModel):
    ok: bool
    detail: str


class PluginOut(BaseModel):
    """A plugin package the rollout service runs (`artfleet envs list` shows why a broken
    one failed)."""

    group: str = Field(description="`artfleet.environments` or `artfleet.agents`")
    name: str = Field(description="the environment's name or the agent kind")
    package: str
    version: str
    state: Literal["loaded", "broken"]


class HealthOut(BaseModel):
    status: Literal["healthy", "unhealthy"]
    version: str
    art_backend: str | None = Field(
        description="the trainer's backend (`torch`, `art`: ARTFLEET_BACKEND); null: no trainer"
    )
    openai_configured: bool | None = Field(
        description="the hosted judge's key (ARTFLEET_JUDGE_API_KEY_ENV, `OPENAI_API_KEY`) is "
        "set in the reward service's environment; null: no reward service"
    )
    wandb_configured: bool | None = Field(
        description="`WANDB_API_KEY` is set in the trainer's environment; null: no trainer"
    )
    dependencies: dict[str, DependencyOut]
    plugins: list[PluginOut] | None = Field(
        default=None,
        description="the plugin packages a rollout replica runs, with their versions; "
        "null: no rollout service answered",
    )


class TrajectoryEntry(BaseModel):
    """One sampled trajectory file, listed."""

    path: str = Field(description="<experiment>/step_<n>/<file>.json under the directory")
    experiment: str
    step: int
    reward: float
    scenario_id: str
    policy_version: int | None


class TrajectoryList(BaseModel):
    trajectories: list[TrajectoryEntry]
    experiments: list[str]


class ErrorOut(BaseModel):
    """Every 4xx/5xx body."""

    error: str = Field(description="what went wrong")
    field: str | None = Field(default=None, description="the request field it is about")
    detail: list[dict[str, Any]] = Field(default_factory=list)
