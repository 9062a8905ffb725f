"""Hostile messages for every RPC of every service, against the real servers (CI size).

Every method of every service in the proto is called with messages hypothesis derives from
the descriptors (see fuzz_kit), with a valid token. Each call must return or fail with a
clear status and a message, never INTERNAL/UNKNOWN or a hang, and the server must still
say SERVING afterwards. `bench/fuzz_bench.py` runs the same with >= 1000 cases a service.

Random cases may miss a field, so a sweep also sends every field of every request message
(nested ones included, listed from the descriptors) a few hostile values, and a test checks
that the sweep's list of fields is complete.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fuzz_kit import (
    SPECIAL_STRINGS,
    FieldCase,
    Verdict,
    field_cases,
    field_chains,
    field_is_set,
    field_path,
    fuzz_service,
    map_entry,
    methods,
    serving,
    sweep_fields,
)
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from service_fleet import SERVICES, FuzzFleet, live_ids, running_fleet, seeds

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXAMPLES = 40  # per service: CI-sized; the bench runs thousands


@pytest.fixture(scope="module")
def fleet(redis_url: str) -> Iterator[FuzzFleet]:
    with running_fleet(redis_url) as started:
        yield started


@pytest.mark.parametrize("service", SERVICES)
def test_every_rpc_answers_hostile_input_clearly(fleet: FuzzFleet, service: str) -> None:
    ids = live_ids(fleet)
    strings = [*SPECIAL_STRINGS, *ids]
    verdicts: list[Verdict] = []

    def judge(verdict: Verdict) -> None:
        verdicts.append(verdict)
        assert not verdict.failure, verdict.failure  # hypothesis shrinks it and prints it

    fuzz_service(fleet, service, EXAMPLES, strings, judge, ids, seeds())
    assert len(verdicts) >= EXAMPLES // 2
    called = {v.method.rsplit("/", 1)[-1] for v in verdicts}
    # Random choice may miss a method in a CI-sized run: each one missed gets its own few.
    missed = [m.name for m in methods(service) if m.name not in called]
    for name in missed:
        fuzz_service(fleet, service, 5, strings, judge, ids, seeds(), only=[name])
    called = {v.method.rsplit("/", 1)[-1] for v in verdicts}
    assert called == {m.name for m in methods(service)}, "every method is fuzzed"
    assert fleet.call(serving(fleet.target(service)), timeout=30)


@pytest.mark.parametrize("service", SERVICES)
def test_every_field_of_every_request_answers_hostile_values_clearly(
    fleet: FuzzFleet, service: str
) -> None:
    ids = live_ids(fleet)
    results = sweep_fields(fleet, service, [*SPECIAL_STRINGS, *ids], ids, seeds())
    failures = [verdict.failure for _, verdict in results if verdict.failure]
    assert not failures, f"{len(failures)} of {len(results)}:\n" + "\n".join(failures[:20])
    # Each field was sent (a value on the wire, not its type's default), every one.
    swept = {_key(case) for case, _ in results if field_is_set(case.request, case.chain)}
    assert swept == _fields(service), f"never sent: {sorted(_fields(service) - swept)}"
    assert fleet.call(serving(fleet.target(service)), timeout=30)


def _key(case: FieldCase) -> tuple[str, str]:
    return case.method.name, case.path


def _fields(service: str) -> set[tuple[str, str]]:
    return {(m.name, field_path(c)) for m in methods(service) for c in field_chains(m.input_type)}


def _owned(field: FieldDescriptor) -> tuple[str, str]:
    owner = field.containing_type
    assert owner is not None  # every field here is a message's
    return owner.full_name, field.name


def _reachable_fields(top: Descriptor) -> set[tuple[str, str]]:
    """(message type, field) of every field of every type reachable from `top`: a plain
    walk of the types, to hold the sweep's chains (which stop at recursion) against."""
    seen: set[str] = set()
    found: set[tuple[str, str]] = set()
    todo = [top]
    while todo:
        message = todo.pop()
        if message.full_name in seen:
            continue
        seen.add(message.full_name)
        for field in message.fields:
            found.add((message.full_name, field.name))
            if field.message_type is not None:
                todo.append(field.message_type)
    return found


@pytest.mark.parametrize("service", SERVICES)
def test_the_sweep_covers_every_field_of_every_request(service: str) -> None:
    """Every field of every message type a request can carry is swept (the chains stop at
    recursive types, so this counts by (type, field)), and the sweep's cases set each
    chain: no field is left to the chance of the random cases."""
    for method in methods(service):
        chains = field_chains(method.input_type)
        ends = {_owned(chain[-1]) for chain in chains}
        entries = [entry for chain in chains if (entry := map_entry(chain[-1])) is not None]
        ends |= {(e.full_name, name) for e in entries for name in ("key", "value")}  # with the map
        missed = _reachable_fields(method.input_type) - ends
        assert not missed, f"{method.name}: fields the sweep never reaches: {sorted(missed)}"
    cases = field_cases(service, SPECIAL_STRINGS)
    assert {_key(c) for c in cases if field_is_set(c.request, c.chain)} == _fields(service)
    assert len(cases) <= 3 * len(_fields(service)), "a few cases per field: CI-sized"


def test_the_sweep_lists_fields_from_the_descriptors() -> None:
    """No hand list: the fields added to the protos lately are swept, and so is a message
    type defined here and now (recursion and maps included)."""
    trainer = _fields("artfleet.v1.Trainer")
    assert {
        ("SubmitJob", "idempotency_key"),
        ("SubmitJob", "spec.skip_bad_records"),
        ("SubmitJob", "spec.mcp_config"),
        ("ResumeJob", "job_id"),
    } <= trainer
    assert ("CheckPolicy", "model_base_url") in _fields("artfleet.v1.Rollout")
    pool = descriptor_pool.DescriptorPool()
    proto = descriptor_pb2.FileDescriptorProto(name="fuzz_new.proto", package="fuzznew")
    node = proto.message_type.add(name="Node")
    node.field.add(name="label", number=1, type=9, label=1)  # string
    node.field.add(name="child", number=2, type=11, label=1, type_name=".fuzznew.Node")
    node.field.add(name="leaves", number=3, type=11, label=3, type_name=".fuzznew.Leaf")
    tags = node.nested_type.add(name="TagsEntry")  # map<string, int32> tags = 4
    named = node.nested_type.add(name="NamedEntry")  # map<string, Leaf> named = 5
    for entry in (tags, named):
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=9, label=1)
    tags.field.add(name="value", number=2, type=5, label=1)
    named.field.add(name="value", number=2, type=11, label=1, type_name=".fuzznew.Leaf")
    node.field.add(name="tags", number=4, type=11, label=3, type_name=".fuzznew.Node.TagsEntry")
    node.field.add(name="named", number=5, type=11, label=3, type_name=".fuzznew.Node.NamedEntry")
    proto.message_type.add(name="Leaf").field.add(name="weight", number=1, type=1, label=1)
    pool.Add(proto)
    chains = field_chains(pool.FindMessageTypeByName("fuzznew.Node"))
    assert [field_path(c) for c in chains] == [
        "label",
        "child",  # a Node: not entered again
        "leaves",
        "leaves.weight",
        "tags",
        "named",
        "named.value.weight",  # through the map's entries
    ]
