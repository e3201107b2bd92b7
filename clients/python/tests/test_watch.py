"""`watch()` resumes by itself across a server restart: every event once, in
order, with no gap, whether the server drains (SIGTERM: the stream ends
UNAVAILABLE "resume from cursor N") or dies (SIGKILL: the connection drops)."""

import asyncio
import signal
from pathlib import Path

import pytest

import countersign
from support import ACTION, Server, unique

TERMINAL = {"approved", "rejected", "cancelled", "timed_out"}
STOPS = [pytest.param(signal.SIGTERM, id="drained"), pytest.param(signal.SIGKILL, id="killed")]


@pytest.fixture
def restartable(tmp_path: Path):
    server = Server(tmp_path)
    try:
        server.seed()
        yield server
    finally:
        server.stop(signal.SIGKILL)


def batch(server: Server, client: countersign.Client, n: int) -> set:
    """Submits `n` proposals (approved and rejected ones); their ids."""
    ids = set()
    for i in range(n):
        target = server.target() if i % 2 == 0 else unique("unknown-host")
        spec = countersign.Spec(action=ACTION, target=target, blast_radius="single_device", reason=unique("why"))
        ids.add(client.submit(spec).proposal.id)
    return ids


def check_stream(seen: list, expected: set) -> None:
    cursors = [n.cursor for n in seen]
    assert cursors == list(range(1, len(seen) + 1)), "every event once, in order, no gap"
    decided = {n.proposal.id for n in seen if n.event in TERMINAL}
    assert decided == expected
    for n in seen:
        assert n.proposal is not None and n.proposal.id in expected
        assert n.emitted_at is not None


@pytest.mark.parametrize("stop", STOPS)
def test_a_watch_resumes_across_a_restart(stop, restartable):
    coordinator = restartable.key("coordinator")
    with countersign.Client(restartable.endpoint, coordinator) as client:
        first = batch(restartable, client, 3)
        expected, second = set(first), set()
        seen = []
        stream = client.watch(after_cursor=0, max_backoff=0.5)
        for notification in stream:
            seen.append(notification)
            decided = {n.proposal.id for n in seen if n.event in TERMINAL}
            if not second and decided >= first:
                # Mid-stream: the server goes away and comes back on the
                # same port and data; new proposals follow.
                restartable.stop(stop)
                restartable.start()
                second = batch(restartable, client, 3)
                expected |= second
            if second and decided >= expected:
                break
        stream.close()
    check_stream(seen, expected)


@pytest.mark.parametrize("stop", STOPS)
def test_an_async_watch_resumes_across_a_restart(stop, restartable):
    coordinator = restartable.key("coordinator")

    async def main():
        seen, expected, second = [], set(), set()
        with countersign.Client(restartable.endpoint, coordinator) as submitter:
            first = batch(restartable, submitter, 3)
        expected |= first
        async with countersign.AsyncClient(restartable.endpoint, coordinator) as client:
            stream = client.watch(after_cursor=0, max_backoff=0.5)
            async for notification in stream:
                seen.append(notification)
                decided = {n.proposal.id for n in seen if n.event in TERMINAL}
                if not second and decided >= first:
                    restartable.stop(stop)
                    restartable.start()
                    with countersign.Client(restartable.endpoint, coordinator) as submitter:
                        second = batch(restartable, submitter, 3)
                    expected |= second
                if second and decided >= expected:
                    break
            await stream.aclose()
        return seen, expected

    seen, expected = asyncio.run(main())
    check_stream(seen, expected)


def test_a_watch_resumes_from_a_given_cursor_and_filters(restartable):
    coordinator = restartable.key("coordinator")
    with countersign.Client(restartable.endpoint, coordinator) as client:
        ids = sorted(batch(restartable, client, 2))
        for proposal_id in ids:
            client.await_decision(proposal_id, timeout=60)
        everything = []
        for notification in client.watch(after_cursor=0):
            everything.append(notification)
            if sum(n.event in TERMINAL for n in everything) == 2:
                break
        later = []
        for notification in client.watch(after_cursor=everything[0].cursor, proposal_ids=[ids[1]], terminal_only=True):
            later.append(notification)
            break
    assert later[0].proposal.id == ids[1] and later[0].event in TERMINAL


def test_a_watch_that_cannot_succeed_raises(restartable):
    with countersign.Client(restartable.endpoint, "cs_not_a_key") as client:
        with pytest.raises(countersign.Unauthenticated):
            next(iter(client.watch(after_cursor=0)))
    auditor = restartable.key("auditor")
    with countersign.Client(restartable.endpoint, auditor) as client:
        with pytest.raises(countersign.PermissionDenied):
            next(iter(client.watch()))
    with pytest.raises(TypeError):
        countersign.Client(restartable.endpoint, auditor).watch(proposal_ids="01ONEID")
