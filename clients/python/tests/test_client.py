"""The clients' plain operations and the context manager, against the real
server, blocking and asyncio alike."""

import asyncio

import pytest

import countersign
from support import ACTION, unique


def spec_for(target, **changes):
    fields = dict(action=ACTION, target=target, blast_radius="single_device", reason=unique("reason"))
    fields.update(changes)
    return countersign.Spec(**fields)


def test_submit_get_and_await_a_decision(server, coordinator):
    with countersign.Client(server.endpoint, coordinator) as client:
        submitted = client.submit(spec_for(server.target(), parameters={"service": "nginx"}))
        assert not submitted.deduplicated and not submitted.suppressed
        decided = client.await_decision(submitted.proposal.id, timeout=60)
        assert decided.state == "approved" and decided.terminal
        assert decided.decision is not None and decided.decision.outcome == "approve"
        assert [g.gate for g in decided.decision.gates][:5] == [
            "sop",
            "target_state",
            "no_parallel_operation",
            "rollback",
            "blast_radius",
        ]
        again = client.get(submitted.proposal.id)
        assert again == decided
        assert again.spec.parameters == {"service": "nginx"}


def test_submit_and_wait_returns_the_decided_proposal_whatever_the_decision(server, coordinator):
    with countersign.Client(server.endpoint, coordinator) as client:
        approved = client.submit_and_wait(spec_for(server.target()), timeout=60)
        rejected = client.submit_and_wait(spec_for(unique("unknown-host")), timeout=60)
    assert approved.state == "approved"
    assert rejected.state == "rejected"
    assert rejected.decision is not None and "target_state" in rejected.decision.missing_gates


def test_cancel_an_open_proposal_but_not_a_decided_one(idle_server, idle_coordinator, server, coordinator):
    with countersign.Client(idle_server.endpoint, idle_coordinator) as client:
        proposal = client.submit(spec_for(idle_server.target())).proposal
        assert proposal.state == "pending"
        cancelled = client.cancel(proposal.id, "not needed")
        assert cancelled.state == "cancelled" and cancelled.cancel_reason == "not needed"
        assert client.await_decision(proposal.id, timeout=10).state == "cancelled"
    with countersign.Client(server.endpoint, coordinator) as client:
        decided = client.submit_and_wait(spec_for(server.target()), timeout=60)
        with pytest.raises(countersign.FailedPrecondition) as refused:
            client.cancel(decided.id)
    assert refused.value.code == "FAILED_PRECONDITION"
    assert refused.value.proposal_id == decided.id


def test_errors_map_to_the_package_exceptions(server, coordinator):
    with countersign.Client(server.endpoint, coordinator) as client:
        with pytest.raises(countersign.NotFound):
            client.get("01KBNOSUCHPROPOSAL000000000")
        with pytest.raises(countersign.InvalidArgument, match="spec.class"):
            client.submit(spec_for(server.target(), cls="read"))
        key = unique("key")
        client.submit(spec_for(server.target(), idempotency_key=key))
        with pytest.raises(countersign.AlreadyExists):
            client.submit(spec_for(server.target(), idempotency_key=key))
    with countersign.Client(server.endpoint, "cs_wrong") as client:
        with pytest.raises(countersign.Unauthenticated) as refused:
            client.get("01KBNOSUCHPROPOSAL000000000")
    assert isinstance(refused.value, countersign.CountersignError)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_an_await_past_its_deadline_raises_with_the_proposal(idle_server, idle_coordinator):
    with countersign.Client(idle_server.endpoint, idle_coordinator) as client:
        proposal = client.submit(spec_for(idle_server.target())).proposal
        with pytest.raises(countersign.DeadlineExceeded) as late:
            client.await_decision(proposal.id, timeout=0.3)
    assert late.value.proposal_id == proposal.id


def test_the_receipt_key_comes_from_get_checkpoint_for_keys_that_may_read_it(server, coordinator):
    with countersign.Client(server.endpoint, server.admin_key) as admin:
        assert admin.trusted_key().hex() == server.public_key
    ran = []
    with countersign.Client(server.endpoint, coordinator) as client:

        @client.gate(action=ACTION, target=server.target(), blast_radius="single_device", reason="r")
        def restart():
            ran.append(True)

        with pytest.raises(countersign.PermissionDenied, match="public_key="):
            restart()
    assert ran == []


def test_the_async_client_does_the_same(server, coordinator, idle_server, idle_coordinator):
    async def main():
        async with countersign.AsyncClient(server.endpoint, coordinator) as client:
            submitted = await client.submit(spec_for(server.target()))
            decided = await client.await_decision(submitted.proposal.id, timeout=60)
            assert decided.state == "approved"
            assert (await client.get(decided.id)) == decided
            rejected = await client.submit_and_wait(spec_for(unique("unknown-host")), timeout=60)
            assert rejected.state == "rejected"
            with pytest.raises(countersign.FailedPrecondition):
                await client.cancel(decided.id)
            with pytest.raises(countersign.NotFound):
                await client.get("01KBNOSUCHPROPOSAL000000000")
        async with countersign.AsyncClient(idle_server.endpoint, idle_coordinator) as client:
            pending = (await client.submit(spec_for(idle_server.target()))).proposal
            with pytest.raises(countersign.DeadlineExceeded):
                await client.await_decision(pending.id, timeout=0.3)
            assert (await client.cancel(pending.id)).state == "cancelled"
        async with countersign.AsyncClient(server.endpoint, server.admin_key) as admin:
            assert (await admin.trusted_key()).hex() == server.public_key

    asyncio.run(main())


def test_countersigned_runs_its_block_only_on_a_verified_approval(server, coordinator):
    ran = []
    with countersign.Client(server.endpoint, coordinator, public_key=server.public_key) as client:
        spec = spec_for(server.target())
        with client.countersigned(spec) as approval:
            ran.append(approval)
            assert countersign.current_approval() is approval
        assert countersign.current_approval() is None
        assert approval.proposal.state == "approved"
        assert approval.receipt.spec_digest == countersign.spec_digest(spec)
        with pytest.raises(countersign.Rejected) as refused:
            with client.countersigned(spec_for(unique("unknown-host"))):
                ran.append("rejected block")
    assert ran == [approval]
    assert refused.value.proposal_id


def test_countersigned_on_the_async_client(server, coordinator, idle_server, idle_coordinator):
    ran = []

    async def main():
        async with countersign.AsyncClient(server.endpoint, coordinator, public_key=server.public_key) as client:
            async with client.countersigned(spec_for(server.target())) as approval:
                ran.append(approval.proposal_id)
            with pytest.raises(countersign.Rejected):
                async with client.countersigned(spec_for(unique("unknown-host"))):
                    ran.append("rejected block")
        async with countersign.AsyncClient(
            idle_server.endpoint, idle_coordinator, public_key=idle_server.public_key
        ) as client:
            with pytest.raises(countersign.DeadlineExceeded):
                async with client.countersigned(spec_for(idle_server.target()), timeout=0.3):
                    ran.append("late block")

    asyncio.run(main())
    assert len(ran) == 1 and ran[0].startswith("01")


def test_countersigned_refuses_a_read_before_sending_it(server, coordinator):
    with countersign.Client(server.endpoint, coordinator, public_key=server.public_key) as client:
        with pytest.raises(ValueError, match="read operations"):
            with client.countersigned(spec_for(server.target(), cls="read")):
                pass
