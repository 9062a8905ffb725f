"""What `model.openai_client()` is inside a fleet episode of the `art` kind: a
`chat.completions.create` that goes through the episode's policy port, inside the budget
every agent kind keeps (docs/own-agents.md, "Budgets").

- The job's `max_turns` counts the rollout's policy calls: the call after the last one
  allowed raises `BudgetExhausted("max_turns")` instead of asking the policy.
- A call whose conversation would pass `max_context_tokens` raises
  `BudgetExhausted("context")`: before the call, when the last answer's tokens plus this
  call's completion limit pass it (the rule of the bundled kinds); after it, when its
  prompt as the policy counted it (the rollout's own messages since then included) plus
  the limit does (its answer is not kept); and when the policy refuses the call for its
  context length (`ports.ContextOverflow`).
- The call's own `max_completion_tokens` (or `max_tokens`) is honoured up to the job's
  `max_tokens`: the smaller wins.

The session keeps what each call was sent and what it answered, so the episode runner can
keep the conversation as far as it went when the budget ends the rollout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from openai import AsyncOpenAI, NotGiven, Omit
from openai.types.chat import ChatCompletion
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage

from artfleet.clients.episode import BudgetExhausted
from artfleet.contracts.art_types import art
from artfleet_rollout import metrics
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.turns import Budget
from artfleet_rollout.ports import ContextOverflow, Policy, PolicyTurn


class PluginFailure(RuntimeError):
    """The plugin's rollout broke the contract (what it returned, the model it named)."""


@dataclass(frozen=True)
class Call:
    """One policy call: how many messages it was sent, and the choice it answered."""

    sent: int
    choice: Choice


@dataclass(frozen=True)
class Ended:
    """Where the budget ended the episode: why, and the conversation of the call refused."""

    stop: BudgetExhausted
    messages: list[Any]
    tools: list[Any] | None


class PolicySession:
    """One episode's calls: the policy, the names it answers to, the budget, the choices."""

    def __init__(self, ctx: EpisodeContext, plugin: str) -> None:
        task = ctx.task
        self.policy: Policy = ctx.policy
        self.served = task.policy  # name@step
        self.model_name = self.served.rpartition("@")[0] or self.served
        self.plugin = plugin
        self.default_version = task.policy_version
        self.max_turns = task.max_turns
        # The bundled kinds' budget; its prompt_tokens: the conversation after the last
        # answer, as usage said.
        self.budget = Budget(task.max_context_tokens, task.max_tokens)
        self.calls: list[Call] = []
        self.versions: list[int | None] = []
        self.limits: list[int] = []  # each call's completion limit
        self.asked: list[int] = []  # the limits the rollout's calls named
        self.ended: Ended | None = None

    def sampled(self, choice: Choice) -> bool:
        return any(call.choice is choice for call in self.calls)

    def check_model(self, model: str) -> None:
        if model not in (self.served, self.model_name):
            raise PluginFailure(
                f"{self.plugin}: the rollout asked for model {model!r}; this job serves "
                f"{self.served!r} (use model.get_inference_name() or model.name)"
            )

    def limit(self, max_completion_tokens: Any, max_tokens: Any) -> tuple[int, bool]:
        """The call's completion limit (the smaller of its own and the job's), and whether
        it named one."""
        asked = max_completion_tokens if _given(max_completion_tokens) else max_tokens
        if not _given(asked):
            return self.budget.max_tokens, False
        if not isinstance(asked, int) or isinstance(asked, bool) or asked <= 0:
            raise PluginFailure(
                f"{self.plugin}: max_completion_tokens must be a positive integer, not {asked!r}"
            )
        self.asked.append(asked)
        return min(asked, self.budget.max_tokens), True

    def admit(self, messages: Sequence[Any], tools: Any, limit: int) -> None:
        """Raises BudgetExhausted for a call past the budget (and for any call after it)."""
        if self.ended is not None:
            raise BudgetExhausted(self.ended.stop.finish, str(self.ended.stop))
        if len(self.calls) >= self.max_turns:
            why = f"{self.plugin}: the job's max_turns ({self.max_turns}) policy calls are spent"
            raise self.end(BudgetExhausted("max_turns", why), messages, tools)
        if self.budget.passed_by(self.budget.prompt_tokens, limit):
            why = (
                f"{self.plugin}: {self.budget.prompt_tokens} tokens of conversation plus "
                f"{limit} to sample pass the job's max_context_tokens "
                f"({self.budget.max_context_tokens})"
            )
            raise self.end(BudgetExhausted("context", why), messages, tools)

    def fits(self, messages: Sequence[Any], tools: Any, turn: PolicyTurn, limit: int) -> None:
        """The call's prompt, counted now, plus its limit must fit the budget: the rollout's
        messages since the last answer could not be counted before the call. One that
        passes it ends the episode as the check before the call would have, unkept."""
        prompt = turn.usage.prompt_tokens if turn.usage is not None else 0
        if self.budget.passed_by(prompt, limit):
            why = (
                f"{self.plugin}: a prompt of {prompt} tokens plus {limit} to sample pass the "
                f"job's max_context_tokens ({self.budget.max_context_tokens})"
            )
            raise self.end(BudgetExhausted("context", why), messages, tools)

    def end(self, stop: BudgetExhausted, messages: Sequence[Any], tools: Any) -> BudgetExhausted:
        self.ended = Ended(stop, list(messages), list(tools) if tools else None)
        return stop

    def answered(self, messages: Sequence[Any], turn: PolicyTurn, limit: int) -> None:
        self.calls.append(Call(len(messages), turn.choice))
        self.versions.append(turn.policy_version)
        self.limits.append(limit)
        if turn.usage is not None:
            self.budget.prompt_tokens = turn.usage.context_tokens

    def kept(self) -> list[Any]:
        """The conversation as far as it went (the refused call's messages), each assistant
        message the rollout appended from a sampled choice back as that choice, so its
        tokens are trained."""
        assert self.ended is not None
        messages: list[Any] = [_plain(m) for m in self.ended.messages]
        for call in self.calls:
            if call.sent < len(messages) and _is_answer(self.ended.messages[call.sent], call):
                messages[call.sent] = call.choice
        return messages


def _given(value: Any) -> bool:
    return value is not None and not isinstance(value, NotGiven | Omit)


def _is_answer(item: Any, call: Call) -> bool:
    """Whether `item`, where the call's answer would follow its prompt, is that answer."""
    message = call.choice.message
    if item is call.choice or item is message:
        return True
    if isinstance(item, dict):
        return item.get("role") == "assistant" and item.get("content") == message.content
    return False


def _plain(item: Any) -> Any:
    """A message as a trajectory keeps it: a dict (an SDK model dumped)."""
    if isinstance(item, Choice | dict):
        return item
    dump = getattr(item, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else item


class _Completions:
    def __init__(self, session: PolicySession) -> None:
        self._session = session

    async def create(
        self,
        *,
        model: str,
        messages: Sequence[Any],
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        stream: bool = False,
        max_completion_tokens: Any = None,
        max_tokens: Any = None,
        **ignored: Any,  # temperature, ...: the job's sampling settings apply
    ) -> ChatCompletion:
        session = self._session
        session.check_model(model)
        if stream:
            raise PluginFailure(
                f"{session.plugin}: stream=True is not served to rollouts (the trainer needs "
                "each turn's sampled tokens): call create() without stream"
            )
        limit, named = session.limit(max_completion_tokens, max_tokens)
        session.admit(messages, tools, limit)
        start = time.perf_counter()
        extra = {"max_tokens": limit} if named else {}
        try:
            turn = await session.policy.complete(
                list(messages), tools=tools, tool_choice=tool_choice, **extra
            )
        except ContextOverflow as exc:
            stop = BudgetExhausted("context", f"{session.plugin}: the policy refused: {exc}")
            raise session.end(stop, messages, tools) from exc
        metrics.MODEL_SECONDS.observe(time.perf_counter() - start)
        session.fits(messages, tools, turn, limit)
        session.answered(messages, turn, limit)
        return _completion(session, turn)


def _completion(session: PolicySession, turn: PolicyTurn) -> ChatCompletion:
    usage = turn.usage
    return ChatCompletion.model_construct(  # the same Choice object, token ids and all
        id=f"artfleet-{len(session.calls)}",
        object="chat.completion",
        created=int(time.time()),
        model=session.served,
        choices=[turn.choice],
        usage=CompletionUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
        )
        if usage
        else None,
    )


class PolicyClient:
    """What `model.openai_client()` returns inside the fleet: `chat.completions.create`."""

    def __init__(self, session: PolicySession) -> None:
        self.chat = SimpleNamespace(completions=_Completions(session))

    def with_options(self, **_: Any) -> PolicyClient:
        return self


def bound_model(ctx: EpisodeContext, session: PolicySession) -> art.Model[Any, Any]:
    model: art.Model[Any, Any] = art.Model(
        name=session.model_name,
        project="artfleet",
        inference_model_name=session.served,
        inference_base_url=ctx.task.model_base_url,
    )
    # ART's openai_client() returns this once set (art.Model keeps its client there).
    model._openai_client = cast(AsyncOpenAI, PolicyClient(session))
    return model
