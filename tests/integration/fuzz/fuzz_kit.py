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
