"""`@client.gate` against the real server: it runs the function once on a
verified approval and never otherwise, for plain functions, `async def`
functions on a Client, and `async def` functions on an AsyncClient."""

import concurrent.futures
import dataclasses
import sqlite3
import time

import pytest

import countersign
from countersign import _wire
from countersign.v1 import types_pb2
from gates import FLAVORS, Gated
from support import ACTION, TamperingProxy, free_port, public_key, sign, unique

pytestmark = pytest.mark.parametrize("flavor", FLAVORS)


def gate_for(target, **changes):
    gate = dict(action=ACTION, target=target, blast_radius="single_device", reason=unique("reason"))
    gate.update(changes)
    return gate


def test_an_approval_runs_the_function_once_under_its_verified_receipt(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    target = server.target()
    args, approval = gated.call(gate_for(lambda host: host, parameters=lambda host: {"host": host}), target)
    assert gated.ran == [(target,)]
    assert args == (target,)
    assert approval.proposal.state == "approved"
    assert approval.proposal.spec.target == target
    receipt = approval.receipt
    assert receipt.proposal_id == approval.proposal.id
    assert receipt.tenant == "default"
    assert receipt.outcome == "approve"
    assert receipt.spec_digest == countersign.spec_digest(approval.proposal.spec)
    assert receipt.expires_at_ms > receipt.decided_at_ms


def test_a_rejection_never_runs_it(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    with pytest.raises(countersign.Rejected) as refused:
        gated.call(gate_for(unique("unknown-host")))
    assert gated.ran == []
    assert refused.value.state == "rejected"
    assert refused.value.proposal_id
    assert refused.value.agent_message
    assert "target_state" in refused.value.reason
    assert not refused.value.suppressed


def test_a_suppressed_retry_raises_at_once_with_the_cached_rejection(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    target = unique("unknown-host")
    with pytest.raises(countersign.Rejected) as first:
        gated.call(gate_for(target, reason="first try"))
    # Reworded: another idempotency key, the same operation.
    with pytest.raises(countersign.Rejected) as retry:
        gated.call(gate_for(target, reason="second try, reworded"))
    assert gated.ran == []
    assert retry.value.suppressed
    assert retry.value.proposal_id == first.value.proposal_id
    assert retry.value.agent_message
    assert retry.value.reason == first.value.reason and "target_state" in retry.value.reason


def test_an_identical_retry_of_a_rejection_gets_its_proposal_again(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    gate = gate_for(unique("unknown-host"))
    with pytest.raises(countersign.Rejected) as first:
        gated.call(gate)
    with pytest.raises(countersign.Rejected) as retry:
        gated.call(gate)
    assert gated.ran == []
    assert retry.value.proposal_id == first.value.proposal_id


def test_an_identical_retry_of_an_approval_reuses_its_proposal(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    gate = gate_for(server.target())
    _, first = gated.call(gate, "attempt")
    _, retry = gated.call(gate, "attempt")
    assert retry.proposal_id == first.proposal_id
    assert len(gated.ran) == 2


def test_an_unreachable_server_never_runs_it(flavor, server, coordinator):
    gated = Gated(flavor, f"http://127.0.0.1:{free_port()}", coordinator, server.public_key)
    with pytest.raises(countersign.Unavailable) as refused:
        gated.call(gate_for("node-1"))
    assert not isinstance(refused.value, countersign.DeadlineExceeded)
    assert refused.value.code == "UNAVAILABLE"
    assert gated.ran == []


def test_a_deadline_that_passes_never_runs_it_and_leaves_the_proposal_open(flavor, idle_server, idle_coordinator):
    gated = Gated(flavor, idle_server.endpoint, idle_coordinator, idle_server.public_key)
    with pytest.raises(countersign.DeadlineExceeded) as late:
        gated.call(gate_for(idle_server.target(), timeout=0.5))
    assert gated.ran == []
    assert isinstance(late.value, countersign.Unavailable)
    with countersign.Client(idle_server.endpoint, idle_coordinator) as client:
        assert client.get(late.value.proposal_id).state == "pending"


def test_a_deadline_already_passed_sends_nothing(flavor, idle_server, idle_coordinator):
    gated = Gated(flavor, idle_server.endpoint, idle_coordinator, idle_server.public_key)
    with pytest.raises(countersign.DeadlineExceeded) as late:
        gated.call(gate_for(idle_server.target(), timeout=0))
    assert late.value.proposal_id is None
    assert gated.ran == []


def test_a_retried_call_finds_its_open_proposal_again(flavor, idle_server, idle_coordinator):
    # A window that no test run straddles: the derived key cannot change
    # between the two calls.
    gated = Gated(flavor, idle_server.endpoint, idle_coordinator, idle_server.public_key, idempotency_window=1e9)
    gate = gate_for(idle_server.target(), timeout=0.3)
    with pytest.raises(countersign.DeadlineExceeded) as first:
        gated.call(gate, "restart")
    with pytest.raises(countersign.DeadlineExceeded) as retry:
        gated.call(gate, "restart")
    with pytest.raises(countersign.DeadlineExceeded) as other_arguments:
        gated.call(dict(gate, parameters=lambda service: {"service": service}), "reload")
    assert retry.value.proposal_id == first.value.proposal_id
    assert other_arguments.value.proposal_id != first.value.proposal_id
    assert gated.ran == []


def test_a_cancelled_proposal_never_runs_it(flavor, idle_server, idle_coordinator):
    gated = Gated(flavor, idle_server.endpoint, idle_coordinator, idle_server.public_key)
    gate = gate_for(idle_server.target(), idempotency_key=unique("cancel-me"), timeout=60)
    spec = countersign.Spec(**{k: v for k, v in gate.items() if k != "timeout"})
    with countersign.Client(idle_server.endpoint, idle_coordinator) as client:
        # The same spec and key as the gated call: the same proposal.
        proposal_id = client.submit(spec).proposal.id
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(gated.call, gate)
            time.sleep(0.5)  # usually waiting by now; either order ends cancelled
            client.cancel(proposal_id, "fixed by a config reload")
            with pytest.raises(countersign.Rejected) as refused:
                waiting.result(timeout=60)
    assert refused.value.state == "cancelled"
    assert refused.value.proposal_id == proposal_id
    assert "config reload" in refused.value.reason
    assert gated.ran == []


def test_a_bad_request_and_a_bad_key_never_run_it(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    with pytest.raises(countersign.InvalidArgument, match="spec.action"):
        gated.call(gate_for(server.target(), action="Not An Action!"))
    impostor = Gated(flavor, server.endpoint, "cs_not_a_key", server.public_key)
    with pytest.raises(countersign.Unauthenticated):
        impostor.call(gate_for(server.target()))
    assert gated.ran == [] and impostor.ran == []


# A man in the middle alters each approval on its way to the client. The
# forged receipts are signed with the server's own key, so only the check
# under test can refuse them.


def _flip_signature(proposal, server):
    receipt = proposal.decision.receipt
    signature = bytearray(bytes.fromhex(receipt.signature))
    signature[7] ^= 0x01
    receipt.signature = signature.hex()


def _another_spec(proposal, server):
    other = countersign.Spec(action=ACTION, target="another-node", blast_radius="single_device", reason="other")
    proposal.decision.receipt.spec_digest = countersign.spec_digest(other)
    _resign(proposal, server)


def _another_tenant(proposal, server):
    proposal.decision.receipt.tenant = "acme"
    _resign(proposal, server)


def _expired(proposal, server):
    proposal.decision.receipt.expires_at = int(time.time() * 1000) - 1000
    _resign(proposal, server)


def _another_proposal(proposal, server):
    proposal.decision.receipt.proposal_id = "01KBNOTTHISPROPOSAL000000000"
    _resign(proposal, server)


def _no_receipt(proposal, server):
    proposal.decision.ClearField("receipt")


def _not_an_approving_decision(proposal, server):
    proposal.decision.outcome = types_pb2.DECISION_OUTCOME_REJECT


def _resign(proposal, server):
    receipt = _wire.decision_from_wire(proposal.decision).receipt
    proposal.decision.receipt.signature = sign(server.signing_seed, receipt.signed_bytes()).hex()


FORGERIES = {
    "flipped-signature-byte": _flip_signature,
    "another-spec-digest": _another_spec,
    "another-tenant": _another_tenant,
    "past-expiry": _expired,
    "another-proposal": _another_proposal,
    "no-receipt": _no_receipt,
    "not-an-approving-decision": _not_an_approving_decision,
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_an_approval_whose_receipt_does_not_hold_never_runs_it(flavor, forgery, server, coordinator):
    def tamper(proposal):
        if proposal.state == types_pb2.PROPOSAL_STATE_APPROVED and proposal.decision.HasField("receipt"):
            FORGERIES[forgery](proposal, server)

    proxy = TamperingProxy(server, tamper)
    try:
        gated = Gated(flavor, proxy.endpoint, coordinator, server.public_key)
        with pytest.raises(countersign.InvalidReceipt) as refused:
            gated.call(gate_for(server.target()))
    finally:
        proxy.close()
    assert gated.ran == []
    assert isinstance(refused.value, countersign.Rejected)
    assert refused.value.proposal_id in proxy.proposal_ids


def test_the_untampered_proxy_passes_approvals_through(flavor, server, coordinator):
    proxy = TamperingProxy(server, lambda proposal: None)
    try:
        gated = Gated(flavor, proxy.endpoint, coordinator, server.public_key)
        gated.call(gate_for(server.target()))
    finally:
        proxy.close()
    assert len(gated.ran) == 1


def test_a_receipt_under_another_key_never_runs_it(flavor, server, coordinator):
    gated = Gated(flavor, server.endpoint, coordinator, public_key(b"\x07" * 32).hex())
    with pytest.raises(countersign.InvalidReceipt, match="signature"):
        gated.call(gate_for(server.target()))
    assert gated.ran == []


TRICKY_PARAMETERS = [
    {"service": "nginx", "signal": "HUP"},
    {"ratio": 0.1, "big": 1e16, "tiny": 1e-7, "plain": 0.00001, "int": 3, "neg": -0.0, "huge": 1.7976931348623157e308},
    {"z": [1, 2.5, None, True, {"b": "ü ☃ 𝄞", "a": 'quote " and \\ and \n\t\x01\x7f'}], "é": {}, "A": "\u2028"},
]


@pytest.mark.parametrize("parameters", TRICKY_PARAMETERS)
def test_the_digest_is_the_servers(flavor, parameters, server, idle_server, idle_coordinator, coordinator):
    spec = countersign.Spec(
        action=ACTION,
        target=idle_server.target(),
        blast_radius="cluster",
        reason=f"{flavor}: \"quoted\", ünïcode, tab\t",
        cls="destructive",
        parameters=parameters,
        operator="ops\u00e9",
        context_summary="line 1\nline 2",
        labels={"zeta": "1", "Alpha": "ü", "b": ""},
        rollback_plan="undo \\ it",
        idempotency_key=unique("digest"),
    )
    with countersign.Client(idle_server.endpoint, idle_coordinator) as client:
        proposal_id = client.submit(spec).proposal.id
    database = idle_server.data_dir / "countersign-data" / "countersign.db"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        (stored,) = db.execute("SELECT spec_digest FROM proposals WHERE id = ?", (proposal_id,)).fetchone()
    assert countersign.spec_digest(spec) == stored
    # And through a gated call: its receipt's digest must be this one.
    gated = Gated(flavor, server.endpoint, coordinator, server.public_key)
    gate = dataclasses.asdict(spec)
    gate.update(target=server.target(), idempotency_key=None)
    _, approval = gated.call(gate)
    assert approval.receipt.spec_digest == countersign.spec_digest(dataclasses.replace(spec, target=gate["target"]))
