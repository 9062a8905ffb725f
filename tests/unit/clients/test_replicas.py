"""Replicas behind one name (artfleet.clients.replicas): resolution, refresh, and the
choice of a replica per call (least loaded, pinned per key, failed ones avoided)."""

from __future__ import annotations

from artfleet.clients.replicas import ReplicaChoice, Resolved, resolve_urls, split_urls


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_new_key_goes_to_the_least_loaded_replica() -> None:
    choice = ReplicaChoice(["a", "b", "c"])
    choice.begin("a")
    choice.begin("a")
    choice.begin("b")
    assert choice.pick("e1") == "c"
    choice.begin("c")
    choice.begin("c")
    assert choice.pick("e2") == "b"  # b has one in flight, a and c two
    assert choice.pick("e2") == "b"


def test_ties_rotate_so_unpinned_calls_spread() -> None:
    choice = ReplicaChoice(["a", "b"])
    assert {choice.pick() for _ in range(4)} == {"a", "b"}


def test_a_key_stays_on_its_replica_even_when_it_is_busier() -> None:
    choice = ReplicaChoice(["a", "b"])
    first = choice.pick("episode")
    assert first is not None
    for _ in range(5):
        choice.begin(first)
    assert [choice.pick("episode") for _ in range(3)] == [first] * 3
    assert choice.pinned("episode") == first


def test_a_failed_replica_is_avoided_until_its_time_is_up() -> None:
    clock = Clock()
    choice = ReplicaChoice(["a", "b"], avoid_s=10, clock=clock)
    choice.begin("b")  # a would be the least loaded
    choice.failed("a")
    assert choice.pick("e") == "b"  # the pin moves off the failed replica
    assert choice.pinned("e") == "b"
    assert choice.order() == ["b", "a"]  # still a candidate, last
    clock.now += 11
    assert choice.order() == ["a", "b"]
    choice.failed("a")
    choice.recovered("a")
    assert not choice.avoided("a")


def test_a_pinned_replica_that_failed_loses_its_key_to_another() -> None:
    choice = ReplicaChoice(["a", "b"])
    pinned = choice.pick("e")
    assert pinned is not None
    other = "b" if pinned == "a" else "a"
    assert choice.pick("e", exclude={pinned}) == other
    assert choice.pick("e") == other  # pinned there from now on
    assert choice.pick("e", exclude={"a", "b"}) is None


def test_every_replica_avoided_still_answers_one() -> None:
    choice = ReplicaChoice(["a", "b"])
    choice.failed("a")
    choice.failed("b")
    assert choice.pick("e") in {"a", "b"}


def test_a_replica_gone_from_the_set_loses_its_keys() -> None:
    choice = ReplicaChoice(["a", "b"])
    choice.begin("b")
    assert choice.pick("e") == "a"
    choice.update(["b", "c"])
    assert choice.pick("e") == "c"


def test_pins_are_an_lru_of_bounded_size() -> None:
    choice = ReplicaChoice(["a"], sticky_size=2)
    for key in ("e1", "e2", "e3"):
        choice.pick(key)
    assert choice.pinned("e1") is None and choice.pinned("e3") == "a"
    choice.forget("e3")
    assert choice.pinned("e3") is None


async def test_resolved_refreshes_when_old_or_stale_and_keeps_the_last_set() -> None:
    clock = Clock()
    answers = [["a"], ["a", "b"], [], ["c"]]
    calls: list[int] = []

    async def resolve() -> list[str]:
        calls.append(1)
        return answers.pop(0)

    resolved = Resolved(resolve, refresh_s=5, clock=clock)
    assert await resolved.get() == ["a"]
    assert await resolved.get() == ["a"] and len(calls) == 1  # fresh: not resolved again
    clock.now += 6
    assert await resolved.get() == ["a", "b"]
    resolved.stale()
    assert await resolved.get() == ["a", "b"]  # an empty answer keeps the last set
    resolved.stale()
    assert await resolved.get() == ["c"]


async def test_resolve_urls_expands_names_and_keeps_what_it_cannot() -> None:
    ips = "http://127.0.0.2:8000/v1, http://127.0.0.1:8000/v1"
    assert await resolve_urls(ips) == ["http://127.0.0.1:8000/v1", "http://127.0.0.2:8000/v1"]
    # One local server under a name, a certificate's host, a name that does not resolve.
    for url in (
        "http://localhost:8000/v1",
        "https://api.example.com/v1",
        "http://no-such-host.invalid:8000/v1",
    ):
        assert await resolve_urls(url) == [url]
    assert split_urls(" http://a/v1 ,,http://b/v1") == ["http://a/v1", "http://b/v1"]
