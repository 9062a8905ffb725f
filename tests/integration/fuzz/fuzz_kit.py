"""Hostile messages for every RPC, derived from the proto descriptors, and their verdicts.

Strategies walk `DESCRIPTOR` fields, so a new field or method is fuzzed without edits here:
each field is unset or a value from its type's strategy (extreme and negative numbers,
NaN and infinities, unknown enum values, huge strings and repeated fields, invalid UTF-8
in bytes, paths that escape, ids of other replicas). A call passes when it returns, or
fails with a clear status and a message; INTERNAL, UNKNOWN or a deadline are failures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import artfleet.v1.reward_pb2
import artfleet.v1.rollout_pb2
import artfleet.v1.sandbox_pb2
import artfleet.v1.trainer_pb2  # noqa: F401  (registers the services in the default pool)

# A clear refusal of bad input; anything else that is not OK is a failure.
CLEAR = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.ABORTED,
    }
)
UNARY_DEADLINE_S = 20.0
STREAM_WINDOW_S = 2.0  # a watch may rightly stay open: read what comes in this window
MAX_DEPTH = 3
HUGE = 300_000

_TYPES = FieldDescriptor
_INT_RANGES = {
    _TYPES.TYPE_INT32: (-(2**31), 2**31 - 1),
    _TYPES.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _TYPES.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _TYPES.TYPE_INT64: (-(2**63), 2**63 - 1),
    _TYPES.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _TYPES.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _TYPES.TYPE_UINT32: (0, 2**32 - 1),
    _TYPES.TYPE_FIXED32: (0, 2**32 - 1),
    _TYPES.TYPE_UINT64: (0, 2**64 - 1),
    _TYPES.TYPE_FIXED64: (0, 2**64 - 1),
}
SPECIAL_STRINGS = (
    "",
    " ",
    "../../etc/passwd",
    "/etc/shadow",
    "a\x00b",
    "ü✓🙂\u202e",
    "x" * HUGE,
    "{not json",
    '{"a": [1, 2, {"b": null}]}',
    "-1",
    "NaN",
    "$(id)`id`;id",
)


def methods(service: str) -> list[MethodDescriptor]:
    found = descriptor_pool.Default().FindServiceByName(service)
    return list(found.methods)


def _ints(kind: int) -> st.SearchStrategy[int]:
    low, high = _INT_RANGES[kind]
    edges = [low, high, 0, -1 if low < 0 else 1, 1]
    return st.one_of(
        st.sampled_from(edges),
        st.integers(low, high),
        st.integers(-3, 100).filter(lambda v: low <= v <= high),
    )


def _scalar(field: FieldDescriptor, strings: Sequence[str], depth: int) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_RANGES:
        return _ints(kind)
    if kind in (_TYPES.TYPE_DOUBLE, _TYPES.TYPE_FLOAT):
        width: Literal[32, 64] = 32 if kind == _TYPES.TYPE_FLOAT else 64
        edges = [
            float("nan"),
            float("inf"),
            float("-inf"),
            -1.0,
            0.0,
            1e308 if width == 64 else 3e38,
        ]
        return st.one_of(st.sampled_from(edges), st.floats(width=width))
    if kind == _TYPES.TYPE_BOOL:
        return st.booleans()
    if kind == _TYPES.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    if kind == _TYPES.TYPE_STRING:
        return st.one_of(st.sampled_from(list(strings)), st.text(max_size=40))
    if kind == _TYPES.TYPE_BYTES:
        invalid = [b"\xff\xfe\xfd", b"\xc3\x28", b"\xed\xa0\x80", b"\x00" * 64, b"\xff" * HUGE]
        return st.one_of(st.sampled_from(invalid), st.binary(max_size=64))
    assert field.message_type is not None
    return message_strategy(field.message_type, strings, depth + 1)


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 6 replaced `label` by `is_repeated`.
    flag = getattr(field, "is_repeated", None)
    if flag is None:  # protobuf < 6
        return bool(getattr(field, "label", 0) == _TYPES.LABEL_REPEATED)
    return bool(flag)


def _repeated(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    # Mostly a few elements; sometimes thousands of copies of one.
    small = elements.filter(
        lambda e: len(e.SerializeToString() if isinstance(e, Message) else repr(e)) < 2000
    )
    many = small.map(lambda e: [e] * 3000)
    return st.one_of(st.lists(elements, max_size=3), many)


def _assign(message: Message, field: FieldDescriptor, value: Any) -> None:
    name = field.name
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        target = getattr(message, name)
        value_field = field.message_type.fields_by_name["value"]
        for key, item in value:
            if value_field.message_type is not None:
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif _is_repeated(field):
        getattr(message, name).extend(value)
    elif field.message_type is not None:
        getattr(message, name).CopyFrom(value)
    else:
        setattr(message, name, value)


def _field_strategy(
    field: FieldDescriptor, strings: Sequence[str], depth: int
) -> st.SearchStrategy[Any]:
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        key = _scalar(entry.fields_by_name["key"], strings, depth)
        value = _scalar(entry.fields_by_name["value"], strings, depth)
        return st.lists(st.tuples(key, value), max_size=3)
    single = _scalar(field, strings, depth)
    return _repeated(single) if _is_repeated(field) else single


def message_strategy(
    descriptor: Descriptor, strings: Sequence[str], depth: int = 0
) -> st.SearchStrategy[Message]:
    """A message of `descriptor`'s type: each field unset or hostile, nested to MAX_DEPTH."""
    cls = GetMessageClass(descriptor)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    fields = list(descriptor.fields)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        for field in fields:
            if draw(st.integers(0, 2)) == 0:  # a third of the fields left unset
                continue
            _assign(message, field, draw(_field_strategy(field, strings, depth)))
        return message

    return build()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def wire_strategy(descriptor: Descriptor) -> st.SearchStrategy[bytes]:
    """Requests no client library would send: corrupt wire format, and invalid UTF-8 in a
    string field (protobuf refuses to put it there, the wire carries it anyway)."""
    options = [st.binary(min_size=1, max_size=48), st.just(b"\xff\xff\xff\xff")]
    for field in descriptor.fields:
        if field.type == _TYPES.TYPE_STRING:
            bad = b"\xff\xfe\xc3\x28"
            key = _varint(field.number << 3 | 2)
            options.append(st.just(key + _varint(len(bad)) + bad))
    return st.one_of(options)


def focused_strategy(
    descriptor: Descriptor, strings: Sequence[str], ids: Sequence[str], seed: Message | None
) -> st.SearchStrategy[Message]:
    """One hostile field in an otherwise valid (`seed`) or default message whose
    `*session_id` fields name live, closed or other replicas' sessions: reaches the code
    behind the first checks."""
    cls = GetMessageClass(descriptor)
    fields = list(descriptor.fields)
    ids_of = [
        f
        for f in fields
        if f.name.endswith("session_id") and f.type == _TYPES.TYPE_STRING and not _is_repeated(f)
    ]

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        if seed is not None:
            message.CopyFrom(seed)
        for field in ids_of if ids else ():
            setattr(message, field.name, draw(st.sampled_from(list(ids))))
        if fields:
            field = draw(st.sampled_from(fields))
            _assign(message, field, draw(_field_strategy(field, strings, 0)))
        return message

    return build()


def call_strategy(
    service: str,
    strings: Sequence[str],
    ids: Sequence[str] = (),
    seeds: Mapping[str, Message] | None = None,
    only: Sequence[str] = (),
) -> st.SearchStrategy[tuple[MethodDescriptor, Message | bytes]]:
    options = [m for m in methods(service) if not only or m.name in only]

    def requests(method: MethodDescriptor) -> st.SearchStrategy[Message | bytes]:
        kind = method.input_type
        return st.one_of(
            message_strategy(kind, strings),
            focused_strategy(kind, strings, ids, (seeds or {}).get(_path(method))),
            wire_strategy(kind),
        )

    return st.sampled_from(options).flatmap(lambda m: st.tuples(st.just(m), requests(m)))


@dataclass(frozen=True)
class Verdict:
    method: str
    outcome: str  # "OK" or the status name
    failure: str  # "" when the outcome is acceptable


def _serialize(request: Message | bytes) -> bytes:
    return request if isinstance(request, bytes) else request.SerializeToString()


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


async def invoke(
    channel: grpc.aio.Channel,
    method: MethodDescriptor,
    request: Message | bytes,
    metadata: Sequence[tuple[str, str]],
) -> Verdict:
    """One call with a deadline; the verdict says whether its outcome is acceptable."""
    reply = GetMessageClass(method.output_type)
    path = _path(method)
    try:
        if method.server_streaming:
            stream = channel.unary_stream(
                path,
                request_serializer=_serialize,
                response_deserializer=reply.FromString,
            )
            call = stream(request, metadata=metadata, timeout=UNARY_DEADLINE_S)
            try:
                async with asyncio.timeout(STREAM_WINDOW_S):
                    async for _ in call:
                        pass
            except TimeoutError:
                call.cancel()  # still open after the window: a watch waiting for news
            return Verdict(path, "OK", "")
        unary = channel.unary_unary(
            path,
            request_serializer=_serialize,
            response_deserializer=reply.FromString,
        )
        await unary(request, metadata=metadata, timeout=UNARY_DEADLINE_S)
        return Verdict(path, "OK", "")
    except grpc.aio.AioRpcError as exc:
        return _judge(path, exc.code(), exc.details() or "")


def _judge(path: str, code: grpc.StatusCode, details: str) -> Verdict:
    if code in CLEAR and details.strip():
        return Verdict(path, code.name, "")
    why = "no message" if code in CLEAR else "not a clear status"
    return Verdict(path, code.name, f"{path}: {code.name} ({why}): {details[:300]}")


async def serving(target: str) -> bool:
    """The overall health of a server (health is open: no token)."""
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def _open(target: str) -> grpc.aio.Channel:
    from artfleet.runtime.rpc.client import CHANNEL_OPTIONS

    return grpc.aio.insecure_channel(target, options=list(CHANNEL_OPTIONS))


def fuzz_service(
    fleet: Any,
    service: str,
    examples: int,
    strings: Sequence[str],
    on_verdict: Callable[[Verdict], None],
    ids: Sequence[str] = (),
    seeds: Mapping[str, Message] | None = None,
    only: Sequence[str] = (),
) -> None:
    """`examples` hostile calls to `service` (hypothesis drives; `on_verdict` judges each);
    `only` limits them to those method names.

    `fleet` is a `fuzz_fleet.FuzzFleet`: calls run on its loop, this thread waits.
    """
    channel = fleet.call(_open(fleet.target(service)), 10)
    metadata = (("authorization", f"Bearer {fleet.token}"),)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(call_strategy(service, strings, ids, seeds, only))
    def one(case: tuple[MethodDescriptor, Message | bytes]) -> None:
        method, request = case
        try:
            verdict = fleet.call(invoke(channel, method, request, metadata), UNARY_DEADLINE_S + 10)
        except concurrent.futures.TimeoutError:
            verdict = Verdict(
                _path(method), "HANG", f"{_path(method)}: no answer past its deadline"
            )
        on_verdict(verdict)

    try:
        one()
    finally:
        fleet.call(channel.close(), 10)


# ---------------------------------------------------------------- every field, a few values each
#
# Random cases may miss a field (a CI-sized run did miss those added since it was written):
# the sweep below sends each field of each request message, nested ones included, a few
# hostile values, the rest of the message valid (a seed) or default. Its list of fields is
# derived from the descriptors, so a field added later is swept the day it lands.

Chain = tuple[FieldDescriptor, ...]
# Hostile several ways at once: no JSON, control and non-printable characters (NUL
# included), a path that climbs, shell syntax, a right-to-left override.
MIXED_STRING = "{../..\x00\x01\x7f $(id) \u202e not json"
MANY = 3000  # copies in a repeated field
SWEEP_CONCURRENCY = 8


def map_entry(field: FieldDescriptor) -> Descriptor | None:
    """The entry type (key, value) of a map field; None for any other field."""
    entry = field.message_type
    return entry if entry is not None and entry.GetOptions().map_entry else None


def field_chains(descriptor: Descriptor) -> list[Chain]:
    """Every field of `descriptor` and of the messages inside it, each as its chain of
    fields from the top (`spec.reward.scorers.name`; through a map, its entry's `value`).
    A message type already on the chain is not entered again (recursive types)."""
    found: list[Chain] = []

    def walk(message: Descriptor, chain: Chain, types: frozenset[str]) -> None:
        for field in message.fields:
            here = (*chain, field)
            found.append(here)
            inner, entry = field.message_type, map_entry(field)
            if entry is not None:  # into its values' type, through the entry's `value`
                value = entry.fields_by_name["value"]
                here, inner = (*here, value), value.message_type
            if inner is None or inner.full_name in types:
                continue
            walk(inner, here, types | {inner.full_name})

    walk(descriptor, (), frozenset({descriptor.full_name}))
    return found


def field_path(chain: Chain) -> str:
    return ".".join(field.name for field in chain)


def _extremes(field: FieldDescriptor, strings: Sequence[str]) -> list[Any]:
    """Hostile values of the field's type, the worst first; none is the type's default
    (a default is no value on the wire)."""
    kind = field.type
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return [low, high, -1] if low < 0 else [high, 2**31]
    if kind in (_TYPES.TYPE_DOUBLE, _TYPES.TYPE_FLOAT):
        big = 3e38 if kind == _TYPES.TYPE_FLOAT else 1e308
        return [float("nan"), float("inf"), float("-inf"), -1.0, big]
    if kind == _TYPES.TYPE_BOOL:
        return [True]
    if kind == _TYPES.TYPE_ENUM:
        return [2**31 - 1, -(2**31)]  # numbers no enum of ours defines
    if kind == _TYPES.TYPE_STRING:
        return [MIXED_STRING, *(s for s in strings if s)]
    if kind == _TYPES.TYPE_BYTES:
        return [b"\xff\xfe\xc3\x28\x00", b"\xff" * HUGE, b"\xed\xa0\x80"]
    assert field.message_type is not None
    return [GetMessageClass(field.message_type)()]  # present, every field unset


def hostile_values(field: FieldDescriptor, strings: Sequence[str], turn: int) -> list[Any]:
    """What the sweep sends `field`: its type's worst value, and one more extreme picked by
    `turn` (so that across the fields every extreme is sent); a repeated field one hostile
    element and MANY copies of it, a map one hostile entry."""
    entry = map_entry(field)
    if entry is not None:
        key = _extremes(entry.fields_by_name["key"], strings)[0]
        return [[(key, _extremes(entry.fields_by_name["value"], strings)[0])]]
    values = _extremes(field, strings)
    if _is_repeated(field):
        return [[values[0]], [values[0]] * MANY]
    return [values[0], values[1 + turn % (len(values) - 1)]] if len(values) > 1 else values


def _map_key(entry: Descriptor) -> Any:
    """The key under which a chain goes through a map (hostile, the same every time)."""
    return _extremes(entry.fields_by_name["key"], ())[0]


def _reach(message: Message, chain: Chain) -> Message:
    """The message holding the chain's last field, made present on the way (a repeated
    field's first element, a map's entry under a hostile key)."""
    fields = iter(chain[:-1])
    for field in fields:
        entry = map_entry(field)
        if entry is not None:
            next(fields)  # the entry's value, reached through its key
            message = getattr(message, field.name)[_map_key(entry)]
        elif _is_repeated(field):
            items = getattr(message, field.name)
            message = items[0] if len(items) else items.add()
        else:
            message = getattr(message, field.name)
            message.SetInParent()
    return message


def field_is_set(message: Message, chain: Chain) -> bool:
    """Whether the request carries the chain's field (a value other than the default)."""
    fields = iter(chain[:-1])
    for field in fields:
        entry = map_entry(field)
        if entry is not None:
            next(fields)
            entries, key = getattr(message, field.name), _map_key(entry)
            if key not in entries:
                return False
            message = entries[key]
        elif _is_repeated(field):
            items = getattr(message, field.name)
            if not len(items):
                return False
            message = items[0]
        elif not message.HasField(field.name):
            return False
        else:
            message = getattr(message, field.name)
    return any(f.number == chain[-1].number for f, _ in message.ListFields())


@dataclass(frozen=True)
class FieldCase:
    method: MethodDescriptor
    chain: Chain
    request: Message

    @property
    def path(self) -> str:
        return field_path(self.chain)


def _base(
    method: MethodDescriptor, ids: Sequence[str], seeds: Mapping[str, Message], swept: str
) -> Message:
    """The method's seed (else the default message) with its `*session_id` fields naming
    a live session, but for the field being swept."""
    message = GetMessageClass(method.input_type)()
    seed = seeds.get(_path(method))
    if seed is not None:
        message.CopyFrom(seed)
    for field in method.input_type.fields:
        named = field.name.endswith("session_id") and field.type == _TYPES.TYPE_STRING
        if ids and named and field.name != swept and not _is_repeated(field):
            setattr(message, field.name, ids[0])
    return message


def field_cases(
    service: str,
    strings: Sequence[str],
    ids: Sequence[str] = (),
    seeds: Mapping[str, Message] | None = None,
) -> list[FieldCase]:
    """Each field (field_chains) of each request message of `service`, set to each of its
    hostile_values in its method's base message."""
    cases = []
    turn = 0
    for method in methods(service):
        for chain in field_chains(method.input_type):
            for value in hostile_values(chain[-1], strings, turn):
                request = _base(method, ids, seeds or {}, chain[0].name)
                _assign(_reach(request, chain), chain[-1], value)
                cases.append(FieldCase(method, chain, request))
            turn += 1
    return cases


def _shown(case: FieldCase) -> str:
    value = repr(case.request)
    return f"{case.path} in {value[:200]}{'...' if len(value) > 200 else ''}"


async def _sweep(
    target: str, token: str, cases: Sequence[FieldCase]
) -> list[tuple[FieldCase, Verdict]]:
    metadata = (("authorization", f"Bearer {token}"),)
    limit = asyncio.Semaphore(SWEEP_CONCURRENCY)
    channel = await _open(target)

    async def one(case: FieldCase) -> tuple[FieldCase, Verdict]:
        async with limit:
            try:
                async with asyncio.timeout(UNARY_DEADLINE_S + 10):
                    verdict = await invoke(channel, case.method, case.request, metadata)
            except TimeoutError:
                path = _path(case.method)
                verdict = Verdict(path, "HANG", f"{path}: no answer past its deadline")
        if verdict.failure:
            verdict = Verdict(
                verdict.method, verdict.outcome, f"{verdict.failure} [{_shown(case)}]"
            )
        return case, verdict

    try:
        return list(await asyncio.gather(*(one(case) for case in cases)))
    finally:
        await channel.close()


def sweep_fields(
    fleet: Any,
    service: str,
    strings: Sequence[str],
    ids: Sequence[str] = (),
    seeds: Mapping[str, Message] | None = None,
) -> list[tuple[FieldCase, Verdict]]:
    """Every field_case of `service`, a few at a time, each judged like a random case."""
    cases = field_cases(service, strings, ids, seeds)
    budget = len(cases) * (UNARY_DEADLINE_S + 10) / SWEEP_CONCURRENCY + 60
    return fleet.call(_sweep(fleet.target(service), fleet.token, cases), budget)
