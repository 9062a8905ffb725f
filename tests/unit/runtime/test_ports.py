"""PortHold: a held port is taken by no other bind, yet a server told to listen there can."""

from __future__ import annotations

import errno
import socket

import pytest

from artfleet.runtime.ports import PortHold


def listen_like_a_server(port: int) -> socket.socket:
    """As gRPC, uvicorn, aiohttp, the Prometheus client and redis-server bind."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_held_port_refuses_other_binds_and_serves_the_one_it_was_held_for() -> None:
    hold = PortHold()
    port = hold.pick()
    try:
        with socket.socket() as other, pytest.raises(OSError) as refused:
            other.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        for _ in range(200):  # the kernel's free ports never include it
            with socket.socket() as any_bind:
                any_bind.bind(("127.0.0.1", 0))
                assert any_bind.getsockname()[1] != port
        with listen_like_a_server(port) as server, socket.create_connection(("127.0.0.1", port)):
            accepted, _ = server.accept()
            accepted.close()
    finally:
        hold.release()


def test_release_lets_every_port_go() -> None:
    hold = PortHold()
    ports = {hold.pick() for _ in range(3)}
    assert hold.held() == ports and len(ports) == 3
    hold.release()
    assert hold.held() == frozenset()
    for port in ports:
        with socket.socket() as plain:
            plain.bind(("127.0.0.1", port))


def test_a_port_another_process_listens_on_is_not_held() -> None:
    with listen_like_a_server(0) as server:
        port = server.getsockname()[1]
        hold = PortHold()
        assert hold.hold(port) is False
        assert hold.held() == frozenset()


def test_holding_a_chosen_port_twice_keeps_one_hold() -> None:
    hold = PortHold()
    port = hold.pick()
    try:
        assert hold.hold(port) is True
        assert hold.held() == {port}
    finally:
        hold.release()
