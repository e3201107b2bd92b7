"""Reading answers off the wire: every field of a proposal lands in the
field of the package's type that has its name, whatever the order the
conversion passes them in."""

import dataclasses
import datetime

import countersign
from countersign import _wire
from countersign.v1 import types_pb2

UTC = datetime.timezone.utc


def at(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=UTC)


def stamp(message, ms: int) -> None:
    message.seconds, message.nanos = divmod(ms, 1000)
    message.nanos *= 1_000_000


def full_proposal() -> types_pb2.Proposal:
    """A proposal with every field set, and no two string fields alike."""
    wire = types_pb2.Proposal(
        id="p-id",
        tenant="t-tenant",
        state=types_pb2.PROPOSAL_STATE_APPROVED,
        submitted_by="key-submitter",
        submitted_by_person="person-submitter",
        suppressed_retries=7,
        cancel_reason="cancel-reason",
    )
    spec = wire.spec
    spec.action = "s-action"
    setattr(spec, "class", types_pb2.OPERATION_CLASS_DESTRUCTIVE)
    spec.target = "s-target"
    spec.parameters.update({"service": "nginx", "n": 2, "list": [1, "two", None, True, {"deep": {}}]})
    spec.reason = "s-reason"
    spec.blast_radius = types_pb2.BLAST_RADIUS_CLUSTER
    spec.operator = "s-operator"
    spec.context_summary = "s-context"
    spec.incident_id = "s-incident"
    spec.labels.update({"env": "prod", "team": "web"})
    spec.rollback_plan = "s-rollback"
    spec.force_approve_no_sop = True
    spec.idempotency_key = "s-key"
    stamp(wire.created_at, 1_700_000_000_123)
    stamp(wire.updated_at, 1_700_000_000_456)
    decision = wire.decision
    decision.outcome = types_pb2.DECISION_OUTCOME_APPROVE
    decision.reason = "d-reason"
    decision.agent_message = "d-agent"
    decision.sop_id = "d-sop"
    decision.sop_version = 3
    decision.rollback_path = "d-rollback"
    decision.gates.add(gate="sop", passed=True, detail="g-1")
    decision.gates.add(gate="target_state", passed=False, detail="g-2")
    decision.missing_gates.extend(["m-1", "m-2"])
    decision.reviewer = "d-reviewer"
    stamp(decision.decided_at, 1_700_000_000_400)
    decision.summary = "d-summary ✓"
    decision.sequence = 42
    decision.digest = "d-digest"
    decision.route_id = "d-route"
    vote = decision.votes.add(person="v-person", key_id="v-key", verdict=types_pb2.VERDICT_REJECT, comment="v-comment")
    stamp(vote.at, 1_700_000_000_300)
    decision.votes.add(person="v-late", key_id="v-key-2", verdict=types_pb2.VERDICT_APPROVE, comment="")
    receipt = decision.receipt
    receipt.tenant = "r-tenant"
    receipt.proposal_id = "r-proposal"
    receipt.spec_digest = "r-digest"
    receipt.outcome = "approve"
    receipt.decided_at = 1_700_000_000_400
    receipt.expires_at = 1_700_000_900_400
    receipt.signature = "ab" * 64
    return wire


def test_every_field_of_a_proposal_is_read_into_its_namesake():
    expected = countersign.Proposal(
        id="p-id",
        tenant="t-tenant",
        spec=countersign.Spec(
            action="s-action",
            target="s-target",
            blast_radius="cluster",
            reason="s-reason",
            cls="destructive",
            parameters={"service": "nginx", "n": 2.0, "list": [1.0, "two", None, True, {"deep": {}}]},
            operator="s-operator",
            context_summary="s-context",
            incident_id="s-incident",
            labels={"env": "prod", "team": "web"},
            rollback_plan="s-rollback",
            force_approve_no_sop=True,
            idempotency_key="s-key",
        ),
        state="approved",
        submitted_by="key-submitter",
        submitted_by_person="person-submitter",
        created_at=at(1_700_000_000_123),
        updated_at=at(1_700_000_000_456),
        decision=countersign.Decision(
            outcome="approve",
            reason="d-reason",
            agent_message="d-agent",
            sop_id="d-sop",
            sop_version=3,
            rollback_path="d-rollback",
            gates=(
                countersign.GateResult(gate="sop", passed=True, detail="g-1"),
                countersign.GateResult(gate="target_state", passed=False, detail="g-2"),
            ),
            missing_gates=("m-1", "m-2"),
            reviewer="d-reviewer",
            decided_at=at(1_700_000_000_400),
            summary="d-summary ✓",
            sequence=42,
            digest="d-digest",
            route_id="d-route",
            votes=(
                countersign.Vote(
                    person="v-person", key_id="v-key", verdict="reject", comment="v-comment", at=at(1_700_000_000_300)
                ),
                countersign.Vote(person="v-late", key_id="v-key-2", verdict="approve", comment="", at=None),
            ),
            receipt=countersign.Receipt(
                tenant="r-tenant",
                proposal_id="r-proposal",
                spec_digest="r-digest",
                outcome="approve",
                decided_at_ms=1_700_000_000_400,
                expires_at_ms=1_700_000_900_400,
                signature=bytes.fromhex("ab" * 64),
            ),
        ),
        suppressed_retries=7,
        cancel_reason="cancel-reason",
    )
    read = _wire.proposal_from_wire(full_proposal())
    assert read == expected
    assert_same_types(read, expected)
    assert read.created_at is not None and read.created_at.tzinfo is UTC


def assert_same_types(read, expected, where="proposal"):
    """Equal is not enough: True == 1 and (1,) != [1] only by type. A
    proposal read off the wire is a Proposal that converts its fields as they
    are read (a subclass); everything inside it has the exact type."""
    if type(expected) is countersign.Proposal:
        assert isinstance(read, countersign.Proposal), where
    else:
        assert type(read) is type(expected), where
    if dataclasses.is_dataclass(expected):
        for field in dataclasses.fields(expected):
            name = field.name
            assert_same_types(getattr(read, name), getattr(expected, name), f"{where}.{name}")
    elif isinstance(expected, dict):
        assert sorted(read) == sorted(expected), where
        for key in expected:
            assert_same_types(read[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(read) == len(expected), where
        for n, (one, other) in enumerate(zip(read, expected)):
            assert_same_types(one, other, f"{where}[{n}]")


def test_a_read_proposal_converts_only_the_fields_that_are_read():
    read = _wire.proposal_from_wire(full_proposal())
    assert read.state == "approved"
    assert read.terminal
    converted = set(vars(read)) - {"_wire"}
    assert converted == {"state"}
    assert read.decision.receipt.outcome == "approve"
    assert set(vars(read)) - {"_wire"} == {"state", "decision"}
    # Read again, the kept value: the same object.
    assert read.decision is read.decision


def test_a_read_proposal_is_a_frozen_proposal_like_any_other():
    read = _wire.proposal_from_wire(full_proposal())
    eager = countersign.Proposal(**{field.name: getattr(read, field.name) for field in dataclasses.fields(read)})
    fresh = _wire.proposal_from_wire(full_proposal())
    assert fresh == eager and eager == fresh and fresh == read
    assert repr(_wire.proposal_from_wire(full_proposal())) == repr(eager)
    assert dataclasses.asdict(_wire.proposal_from_wire(full_proposal())) == dataclasses.asdict(eager)
    changed = dataclasses.replace(_wire.proposal_from_wire(full_proposal()), state="rejected")
    assert changed.state == "rejected" and changed.id == "p-id" and changed != eager
    assert _wire.proposal_from_wire(full_proposal()) != dataclasses.replace(eager, cancel_reason="another")
    try:
        read.state = "rejected"
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a read proposal took an assignment")
    assert read.state == "approved"
    try:
        read.no_such_field
    except AttributeError:
        pass
    else:
        raise AssertionError("an unknown attribute read as something")


def test_the_field_by_field_conversion_names_every_field_of_a_proposal():
    assert _wire._PROPOSAL_NAMES == tuple(field.name for field in dataclasses.fields(countersign.Proposal))


def test_absent_parts_of_a_proposal_read_as_none_or_empty():
    wire = types_pb2.Proposal(id="p", state=types_pb2.PROPOSAL_STATE_PENDING)
    read = _wire.proposal_from_wire(wire)
    assert (read.created_at, read.updated_at, read.decision) == (None, None, None)
    assert read.spec == countersign.Spec(action="", target="", blast_radius="", reason="", cls="")
    decision = _wire.decision_from_wire(types_pb2.Decision())
    assert (decision.outcome, decision.decided_at, decision.receipt) == ("", None, None)
    assert decision.gates == () and decision.votes == () and decision.missing_gates == ()


def test_timestamps_keep_their_milliseconds_and_drop_finer_digits():
    wire = types_pb2.Proposal(id="p")
    wire.created_at.seconds, wire.created_at.nanos = 1_796_187_859, 732_999_999
    read = _wire.proposal_from_wire(wire)
    assert read.created_at == datetime.datetime(2026, 12, 2, 5, 4, 19, 732_000, tzinfo=UTC)
