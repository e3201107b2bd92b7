"""Escalated proposals: a gated call waits for people up to its deadline, runs
on their approval (with the receipt Resolve's decision carries) and never on
their rejection or when the deadline passes first."""

import concurrent.futures
import time

import pytest

import countersign
from countersign.v1 import (
    escalation_service_pb2,
    escalation_service_pb2_grpc,
    policy_service_pb2,
    policy_service_pb2_grpc,
    types_pb2,
)
from gates import FLAVORS, Gated
from support import unique

ESCALATED_ACTION = "py_escalated_restart"

pytestmark = pytest.mark.parametrize("flavor", FLAVORS)


@pytest.fixture(scope="module")
def oncall(server):
    """A route that sends every proposal of ESCALATED_ACTION to one person,
    an SOP under which its gates pass, and that person's key."""
    server.put_sop("SOP-PY-ESCALATED", ESCALATED_ACTION, selector={"env": "pytest"})
    route = types_pb2.Route(
        id="py-escalate", match=types_pb2.RouteMatch(actions=[ESCALATED_ACTION]), approvals_required=1
    )
    with server.channel() as channel:
        policy = policy_service_pb2_grpc.PolicyServiceStub(channel)
        policy.PutRoute(policy_service_pb2.PutRouteRequest(route=route), metadata=server.auth())
    return server.key("oncall", "--person", "ann@example.com")


def resolve(server, key, proposal_id, verdict):
    with server.channel() as channel:
        escalations = escalation_service_pb2_grpc.EscalationServiceStub(channel)
        request = escalation_service_pb2.ResolveRequest(proposal_id=proposal_id, verdict=verdict, comment="looked at it")
        escalations.Resolve(request, metadata=(("authorization", f"Bearer {key}"),))


def escalated_gate(server, **changes):
    gate = dict(
        action=ESCALATED_ACTION,
        target=server.target(),
        blast_radius="single_device",
        reason=unique("reason"),
        idempotency_key=unique("escalated"),
    )
    gate.update(changes)
    return gate


def test_an_escalation_waits_up_to_the_deadline_then_raises(flavor, server, coordinator, oncall):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    with pytest.raises(countersign.DeadlineExceeded) as late:
        gated.call(escalated_gate(server, timeout=0.5))
    assert gated.ran == []
    with countersign.Client(server.endpoint, coordinator) as client:
        assert client.get(late.value.proposal_id).state == "escalated"
        client.cancel(late.value.proposal_id, "the test is over")


@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_a_waiting_gate_follows_the_persons_verdict(flavor, verdict, server, coordinator, oncall):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    gate = escalated_gate(server, timeout=60)
    spec = countersign.Spec(**{k: v for k, v in gate.items() if k != "timeout"})
    with countersign.Client(server.endpoint, coordinator) as client:
        # The gated call's own proposal (same spec, same key).
        proposal_id = client.submit(spec).proposal.id
        for notification in client.watch(after_cursor=0, proposal_ids=[proposal_id]):
            if notification.event == "escalated":
                break
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(gated.call, gate, "node")
            time.sleep(0.5)  # usually waiting by now; either order ends the same
            wanted = types_pb2.VERDICT_APPROVE if verdict == "approve" else types_pb2.VERDICT_REJECT
            resolve(server, oncall, proposal_id, wanted)
            if verdict == "approve":
                _, approval = waiting.result(timeout=60)
                assert gated.ran == [("node",)]
                assert approval.proposal_id == proposal_id
                assert approval.receipt.proposal_id == proposal_id
                assert approval.proposal.decision.route_id == "py-escalate"
            else:
                with pytest.raises(countersign.Rejected) as refused:
                    waiting.result(timeout=60)
                assert refused.value.proposal_id == proposal_id
                assert gated.ran == []
