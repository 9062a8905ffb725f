"""The job spec: defaults, validation with field names, YAML and proto forms.

The trainer validates every SubmitJob with this model, and the CLI uses it to read YAML
files, so both reject the same specs with the same messages. Its reward keys (`reward`,
`reward_clip`) are the shared reward spec model (artfleet.specs.reward), which the reward
service validates with too.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from artfleet.specs.base import FieldError, InvalidSpec, field_of, nested_error, spec_error
from artfleet.specs.correction import (
    CorrectionModel,
    correction_data_from_proto,
    correction_to_proto,
    effective,
)
from artfleet.specs.grpo import GrpoModel, grpo_data_from_proto
from artfleet.specs.hud_config import (
    ENVIRONMENTS_KEY,
    TRAINING_KEY,
    check_mcp_config,
    from_environments,
    from_training,
)
from artfleet.specs.reward import (
    CLIP_FIELD,
    SPEC_FIELD,
    GateModel,
    RangeModel,
    RewardSpecModel,
    ScorerModel,
    Scorers,
    default_scorers,
    reward_data_from_proto,
    reward_to_proto,
)
from artfleet.specs.sft import SftModel, sft_data_from_proto, sft_to_proto
from artfleet.v1 import common_pb2 as pb

# The reward spec's models, where job-spec code has always found them.
__all__ = [
    "DEFAULT_BASE_MODEL",
    "NAME_PATTERN",
    "CorrectionModel",
    "Finetune",
    "GateModel",
    "GrpoModel",
    "JobSpecModel",
    "RangeModel",
    "ScorerModel",
    "SftModel",
    "config_hash",
    "default_scorers",
    "mcp_config_json",
    "reward_spec_proto",
    "spec_from_proto",
    "spec_to_proto",
    "validate_spec",
    "with_default_reward",
]

DEFAULT_BASE_MODEL = "smollm2-135m-instruct"
MAX_STEPS_OFF_POLICY = 8  # beyond a few versions the importance ratios are mostly clipped
# A job, project or experiment name (the HTTP API checks its names with the same pattern).
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_NAME = re.compile(NAME_PATTERN)
# What a job trains (`finetune`): a LoRA adapter, or every weight (the HTTP API's body too).
Finetune = Literal["lora", "full"]


class JobSpecModel(BaseModel):
    """What a person submits. Field names match the CLI flags and the YAML keys. It has a
    reward spec (`reward_spec`), whose keys `reward` and `reward_clip` stay at the top level
    of the job spec, as every spec file writes them."""

    model_config = ConfigDict(extra="forbid")

    reward: Scorers = field_of(RewardSpecModel, SPEC_FIELD)
    reward_clip: RangeModel | None = field_of(RewardSpecModel, CLIP_FIELD)

    name: str = Field(default="agent", description="ART model name")
    project: str = "artfleet"
    base_model: str = Field(default=DEFAULT_BASE_MODEL, description="base model")
    backend: Literal["torch", "art"] = Field(default="torch", description="torch | art")
    environment: str = Field(default="shell-tasks", description="environment (task set)")
    split: str = "train"
    steps: int = Field(default=3, ge=1, le=100_000, description="training steps")
    groups_per_step: int = Field(default=2, ge=1, le=4096, description="scenarios per step")
    rollouts_per_group: int = Field(
        default=4,
        ge=2,
        le=256,
        description="episodes per scenario (>= 2: GRPO compares within a group)",
    )
    learning_rate: float = Field(default=5e-5, gt=0, le=1.0)
    max_turns: int = Field(default=4, ge=1, le=200, description="assistant turns per episode")
    seed: int = Field(
        default=0, ge=0, description="scenario order, each policy request's sampling, LoRA init"
    )
    temperature: float = Field(default=0.7, ge=0, le=5.0)  # the terminal agent's default
    max_tokens: int = Field(default=96, ge=1, le=32_768)
    # The episode's context budget; refused at submit beyond what the serving engine takes
    # (artfleet_trainer.jobs.context_limit).
    max_context_tokens: int = Field(default=2048, ge=256, le=1_048_576)
    # Hybrid reasoning models (Qwen3): the chat template's `enable_thinking`, sent with every
    # policy call of the job as `chat_template_kwargs`; None = the template's own default.
    enable_thinking: bool | None = Field(
        default=None, description="thinking on/off: the chat template's enable_thinking"
    )
    # The training scripts' --max-concurrent: episodes of this job running at once in each rollout
    # worker (0 = no limit beyond the worker's own groups_concurrency).
    max_concurrent: int = Field(
        default=0, ge=0, le=100_000, description="episodes of this job at once per rollout worker"
    )
    lora_rank: int = Field(default=8, ge=1, le=512)
    # What the job trains: a LoRA adapter on the shared base (many jobs per base and per
    # inference service), or every weight of a model copy of its own (torch backend).
    finetune: Finetune = Field(
        default="lora",
        description="lora | full: a LoRA adapter on the shared base, or every weight",
    )
    # Jobs side by side on one trainer take its gate in turn; a waiting step gains one for
    # every turn passed over, so a low priority delays a job's steps, never stops them.
    priority: int = Field(
        default=0,
        ge=-100,
        le=100,
        description="turn at the trainer when jobs run side by side: higher first (0 = even)",
    )
    gather_timeout_s: float = Field(default=900.0, gt=0, le=86_400)
    min_group_fraction: float = Field(default=0.5, gt=0, le=1.0)
    # GPU memory knobs of the art backend (as HUD's ART trainer sets them); None = ART's defaults.
    max_seq_length: int | None = Field(default=None, ge=256, le=1_048_576)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1.0)
    # Replaces the environment's system prompt (the HTTP training API's `task_prompt`);
    # "" = its own.
    task_prompt: str = Field(default="", max_length=32_768)
    # Step s+1 .. s+k roll out while step s trains.
    max_steps_off_policy: int = Field(
        default=0,
        ge=0,
        le=MAX_STEPS_OFF_POLICY,
        description="asynchronous steps: roll out up to k steps ahead of training (0 = sync)",
    )
    # How the loss corrects for off-policy samples (artfleet.specs.correction); None = none
    # (or the grpo block's truncated_importance_sampling): `correction`.
    off_policy_correction: CorrectionModel | None = None
    # Experiment identity (the training scripts' --experiment-name); `jobs list --experiment`
    # filters on it.
    experiment: str = Field(default="default", description="experiment name")
    grpo: GrpoModel = Field(default_factory=GrpoModel)
    # Evaluation inside the job: before step 1 and every N steps.
    eval_every_steps: int = Field(
        default=0, ge=0, le=100_000, description="evaluate every N steps; 0 = never"
    )
    eval_split: str = "test"
    eval_k: int = Field(default=2, ge=1, le=256)
    eval_max_tasks: int = Field(default=0, ge=0, le=100_000)  # 0 = every task of the split
    # None = `temperature`; 0 = greedy (no sampling noise between the before/after evals).
    eval_temperature: float | None = Field(default=None, ge=0, le=5.0)
    # Checkpoint retention (ART's training scripts keep the latest 3): last K (0 = all) + best
    # by an eval metric ("" = none).
    keep_last: int = Field(
        default=0, ge=0, le=100_000, description="keep the last N checkpoints; 0 = all"
    )
    keep_best_metric: Literal["", "pass_at_k", "success_rate", "avg_at_k", "reward_mean"] = ""
    # The training scripts' --log-sample-rate: this fraction of rollouts as readable JSON on disk.
    log_sample_rate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="fraction of rollouts written as JSON under logs/<experiment>/step_<n>/",
    )
    # The training scripts' --dataset-size / --num-epochs; 0 = all scenarios / as many as
    # steps need.
    dataset_size: int = Field(
        default=0, ge=0, le=10_000_000, description="seed-fixed subset of the split"
    )
    num_epochs: int = Field(default=0, ge=0, le=100_000, description="passes over the scenarios")
    # The offline warm-start: SFT on samples before GRPO step 1; None = no SFT phase.
    sft: SftModel | None = None
    # The MCP server every scenario runs against instead of its own (HUD's `mcp_config`,
    # one server); None = each scenario's own. A HUD config.yaml's `environments:` block
    # sets it (artfleet.specs.hud_config).
    mcp_config: dict[str, Any] | None = None
    # A data file the job reads (a JSONL environment, SFT samples) with bad records: False
    # refuses the job at submit naming them (`file:line: reason`); True leaves them out,
    # counted (artfleet.contracts.records).
    skip_bad_records: bool = Field(
        default=False, description="leave out a data file's bad records instead of refusing"
    )

    @model_validator(mode="before")
    @classmethod
    def _hud_config(cls, data: Any) -> Any:
        """A HUD config.yaml's blocks become the job spec keys they set."""
        if isinstance(data, dict) and {ENVIRONMENTS_KEY, TRAINING_KEY} & set(data):
            data = dict(data)
            if ENVIRONMENTS_KEY in data:
                from_environments(data, cls._check_max_turns)
            if TRAINING_KEY in data:
                from_training(data, cls.model_fields)
        return data

    @classmethod
    def _check_max_turns(cls, value: Any) -> Any:
        adapter = TypeAdapter(Annotated[int, cls.model_fields["max_turns"]])
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            raise nested_error(exc, "max_turns") from None

    @model_validator(mode="after")
    def _one_tis_cap(self) -> JobSpecModel:
        if self.off_policy_correction is not None and (
            self.grpo.truncated_importance_sampling is not None
        ):
            raise FieldError(
                ("grpo", "truncated_importance_sampling"),
                "set the correction once: off_policy_correction (mode tis, cap) replaces it",
            )
        return self

    @model_validator(mode="after")
    def _full_fine_tune_fits(self) -> JobSpecModel:
        if self.finetune != "full":
            return self
        # ART's own backend (Unsloth) trains LoRA adapters only, as ArtFleet runs it.
        if self.backend == "art":
            raise FieldError(
                ("finetune",), "full fine-tuning needs backend torch (the art backend is LoRA)"
            )
        # The KL term's reference is the base model: a LoRA's adapter switched off; a full
        # fine-tune keeps no copy of the base to score against.
        if self.grpo.kl_penalty_coef:
            raise FieldError(
                ("grpo", "kl_penalty_coef"),
                "a full fine-tune has no reference model (the base is not kept): "
                "set it to 0, or finetune: lora",
            )
        return self

    @property
    def correction(self) -> CorrectionModel:
        """The off-policy correction the job trains with (its default when unset)."""
        return effective(
            self.off_policy_correction, grpo_tis=self.grpo.truncated_importance_sampling
        )

    @field_validator("name", "project", "experiment")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use 1-63 lowercase letters, digits, '.', '_' or '-'")
        return value

    @field_validator("mcp_config")
    @classmethod
    def _one_server(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_mcp_config(value)

    @property
    def reward_spec(self) -> RewardSpecModel:
        """The job's reward spec (already validated with the job spec)."""
        return RewardSpecModel.model_construct(
            {SPEC_FIELD, CLIP_FIELD} & self.model_fields_set,
            reward=self.reward,
            reward_clip=self.reward_clip,
        )


def validate_spec(data: dict[str, Any]) -> JobSpecModel:
    """Raises InvalidArgument naming the first bad field (e.g. `steps`, `reward[1].name`)."""
    try:
        return JobSpecModel.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc) from None


# Labels and what is observed or kept, not how the policy trains: two jobs differing only
# here train the same way and share a config hash.
NOT_TRAINING_FIELDS = frozenset(
    {
        "name",
        "project",
        "experiment",
        "eval_every_steps",
        "eval_split",
        "eval_k",
        "eval_max_tasks",
        "eval_temperature",
        "keep_last",
        "keep_best_metric",
        "log_sample_rate",
        "max_concurrent",
        # Only a job whose file has bad records differs, and without it that job never runs.
        "skip_bad_records",
    }
)


def config_hash(spec: JobSpecModel) -> str:
    """A stable id of what the job trains: sha256 of the validated spec's canonical JSON
    (defaults filled in, keys sorted) without NOT_TRAINING_FIELDS; 12 hex digits."""
    data = spec.model_dump(mode="json", exclude=set(NOT_TRAINING_FIELDS))
    # Specs without these keep the hash they had.
    for key in ("sft", "mcp_config", "enable_thinking", "off_policy_correction"):
        if data.get(key) is None:
            data.pop(key, None)
    # `finetune` came later: a LoRA job (its default) keeps the hash it had before.
    if data.get("finetune") == "lora":
        data.pop("finetune")
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def spec_to_proto(spec: JobSpecModel) -> pb.JobSpec:
    """A spec without a `reward` key goes with no scorers: the trainer fills in the defaults
    of the environment's agent kind (`with_default_reward`)."""
    data = spec.model_dump(
        exclude={SPEC_FIELD, CLIP_FIELD, "grpo", "sft", "mcp_config", "off_policy_correction"}
    )
    reward = reward_to_proto(spec.reward_spec)
    if SPEC_FIELD not in spec.model_fields_set:
        del reward.scorers[:]
    message = pb.JobSpec(
        **data,
        reward=reward,
        grpo=pb.GrpoSpec(**spec.grpo.set_fields()),
        mcp_config=mcp_config_json(spec),
    )
    if spec.sft is not None:
        message.sft.CopyFrom(sft_to_proto(spec.sft))
    if spec.off_policy_correction is not None:
        message.off_policy_correction.CopyFrom(correction_to_proto(spec.off_policy_correction))
    return message


def mcp_config_json(spec: JobSpecModel) -> str:
    """The spec's mcp_config as the JobSpec, GroupTask and DescribeEnvironment messages carry
    it; "" = none."""
    return "" if spec.mcp_config is None else json.dumps(spec.mcp_config, sort_keys=True)


def with_default_reward(spec: JobSpecModel, agent: str) -> JobSpecModel:
    """The spec with its reward written out: the agent kind's default scorers where the
    submitter gave none (an MCP environment scores with its own evaluate tool)."""
    if SPEC_FIELD in spec.model_fields_set:
        return spec
    return spec.model_copy(update={SPEC_FIELD: default_scorers(agent)})


def spec_from_proto(message: pb.JobSpec) -> JobSpecModel:
    """Unset proto fields (zero values, or absent where presence is explicit) take the
    defaults; the rest is validated."""
    data: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.name == "reward":
            continue
        if field.name == "grpo":
            data["grpo"] = grpo_data_from_proto(value)
            continue
        if field.name == "sft":
            data["sft"] = sft_data_from_proto(value)
            continue
        if field.name == "mcp_config":
            data["mcp_config"] = _mcp_config_from_json(value)
            continue
        if field.name == "off_policy_correction":
            data["off_policy_correction"] = correction_data_from_proto(value)
            continue
        data[field.name] = value
    data.update(reward_data_from_proto(message.reward))
    return validate_spec(data)


def _mcp_config_from_json(text: str) -> Any:
    """The JobSpec's `mcp_config`, JSON on the wire: text that does not parse is the
    submitter's error, named (a JSONDecodeError would surface as INTERNAL)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser
        raise InvalidSpec("mcp_config", f"must be a JSON object: {exc}") from None


def reward_spec_proto(spec: JobSpecModel) -> pb.RewardSpec:
    """The job's reward spec as the reward service takes it (Reward.ScoreGroup/ValidateSpec)."""
    return reward_to_proto(spec.reward_spec)
