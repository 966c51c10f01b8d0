"""The gRPC proxy's channels to model servers (`grpc_proxy.Channels`) with real gRPC: two
real gRPC servers on loopback stand for a model server before and after it moved (rolled,
rescheduled). A channel the proxy no longer uses is closed (a call on it raises "closed
channel"), never under a call in flight: the old address when its last call ends, an
address no call used for the idle time (a deleted model server), all at shutdown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from tfkube.server.api.grpc_proxy import Channels

METHOD = "/tensorflow.serving.PredictionService/Predict"


class Upstream:
    """A real gRPC server on loopback answering `METHOD` with its name; a request `b"hold"`
    waits until `release` is set (a call in flight)."""

    def __init__(self, name: str) -> None:
        self.name = name.encode()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([self._Handler(self)])
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    class _Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
        def __init__(self, upstream: Upstream) -> None:
            self.upstream = upstream

        def service(self, details: Any) -> grpc.RpcMethodHandler | None:
            if details.method != METHOD:
                return None
            return grpc.unary_unary_rpc_method_handler(self.answer)

        def answer(self, request: bytes, context: grpc.ServicerContext) -> bytes:
            if request == b"hold":
                self.upstream.holding.set()
                assert self.upstream.release.wait(30)
            return self.upstream.name

    def stop(self) -> None:
        self.release.set()
        self.server.stop(None).wait(5)


@pytest.fixture
def upstreams() -> Iterator[tuple[Upstream, Upstream]]:
    old, new = Upstream("old"), Upstream("new")
    try:
        yield old, new
    finally:
        old.stop()
        new.stop()


@pytest.fixture
def channels() -> Iterator[Channels]:
    made = Channels()
    yield made
    made.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ask(channel: grpc.Channel, request: bytes = b"hi") -> bytes:
    answer: bytes = channel.unary_unary(METHOD)(request, timeout=30)
    return answer


def closed(channel: grpc.Channel) -> bool:
    try:
        ask(channel)
    except ValueError as exc:  # grpc's "Cannot invoke RPC on closed channel!"
        return "closed channel" in str(exc)
    return False


def called(channels: Channels, server_id: str, upstream: Upstream) -> grpc.Channel:
    """The channel one call to `upstream` for `server_id` went through (it answered)."""
    with channels.call(server_id, upstream.address) as channel:
        assert ask(channel) == upstream.name
    return channel


class InFlight:
    """A call through `channels` to `upstream` for `server_id`, held there until the
    upstream's `release` is set; `end` waits for it and gives its answer."""

    def __init__(self, channels: Channels, server_id: str, upstream: Upstream) -> None:
        self.answers: list[bytes] = []

        def call() -> None:
            with channels.call(server_id, upstream.address) as channel:
                self.answers.append(ask(channel, b"hold"))

        self.thread = threading.Thread(target=call)
        self.thread.start()
        self.upstream = upstream
        assert upstream.holding.wait(30)

    def end(self) -> list[bytes]:
        self.upstream.release.set()
        self.thread.join(30)
        return self.answers


def test_a_moved_model_servers_old_channel_closes_after_its_call_in_flight(
    upstreams: tuple[Upstream, Upstream], channels: Channels
) -> None:
    old, new = upstreams
    first = called(channels, "ms-1", old)
    with channels.call("ms-1", old.address) as again:
        assert again is first  # one channel per address, reused
    # A call in flight on the old address while the model server moves.
    held = InFlight(channels, "ms-1", old)
    moved = called(channels, "ms-1", new)
    assert not closed(first)  # still serving the call in flight
    assert channels.open() == sorted([old.address, new.address])
    assert held.end() == [b"old"]  # the call in flight ended well
    assert closed(first)  # then its channel was closed
    assert channels.open() == [new.address]
    channels.close()
    assert closed(moved)
    assert channels.open() == []


def test_an_address_with_no_call_in_flight_closes_at_once_unless_another_uses_it(
    upstreams: tuple[Upstream, Upstream], channels: Channels
) -> None:
    old, new = upstreams
    shared = called(channels, "ms-1", old)
    with channels.call("ms-2", old.address) as same:
        assert same is shared
    called(channels, "ms-1", new)
    assert not closed(shared)  # ms-2 is still there
    with channels.call("ms-2", new.address):
        pass
    assert closed(shared)
    assert channels.open() == [new.address]
    # Back to an address: a new channel.
    with channels.call("ms-2", old.address) as back:
        assert back is not shared
        assert ask(back) == b"old"
    channels.close()


def test_an_idle_channel_closes_at_the_sweep_but_never_under_a_call(
    upstreams: tuple[Upstream, Upstream],
) -> None:
    """A deleted model server: the proxy is not told; its channel goes once idle."""
    old, new = upstreams
    clock = Clock()
    channels = Channels(idle=600, clock=clock)
    gone = called(channels, "ms-1", old)
    busy = called(channels, "ms-2", new)
    clock.now += 599
    assert channels.sweep() == []
    clock.now += 1
    held = InFlight(channels, "ms-2", new)
    clock.now += 1000  # the call in flight is longer than the idle time
    assert channels.sweep() == [old.address]
    assert closed(gone)
    assert not closed(busy)
    assert held.end() == [b"new"]
    assert channels.open() == [new.address]
    clock.now += 600
    assert channels.sweep() == [new.address]
    assert closed(busy)
    # The next call to a model server whose channel was swept opens a new one.
    reopened = called(channels, "ms-1", old)
    channels.close()
    assert closed(reopened)
