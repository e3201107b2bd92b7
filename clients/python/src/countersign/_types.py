"""The package's own value types: what its calls take and return, so that no
protobuf or gRPC type is part of its API."""

import datetime
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

#: How far an operation reaches: ``"single_device"``, ``"cluster"`` or ``"tenant_wide"``.
BLAST_RADII = ("single_device", "cluster", "tenant_wide")
#: Operation classes. Reads are never reviewed, so never submitted.
CLASSES = ("read", "write", "destructive")
#: States that end a proposal.
TERMINAL_STATES = frozenset({"approved", "rejected", "cancelled", "timed_out"})


def _utc(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


@dataclass(frozen=True)
class Spec:
    """What a coordinator proposes to do (``countersign.v1.ProposalSpec``).

    ``cls`` is the operation class (``"write"`` or ``"destructive"``);
    ``parameters`` is a JSON-like mapping (its numbers travel as doubles).
    """

    action: str
    target: str
    blast_radius: str
    reason: str
    cls: str = "write"
    parameters: Mapping[str, Any] = field(default_factory=dict)
    operator: str = ""
    context_summary: str = ""
    incident_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    rollback_plan: str = ""
    force_approve_no_sop: bool = False
    #: Same key and same spec: the same proposal; same key, another spec: ``AlreadyExists``.
    idempotency_key: str = ""


@dataclass(frozen=True)
class Receipt:
    """The server's signed statement of a decision, bound to one proposal of
    one tenant and to the digest of its exact spec, valid until ``expires_at``.

    The signature is Ed25519 over :meth:`signed_bytes`, made with the key
    that signs the decision log's checkpoints.
    """

    tenant: str
    proposal_id: str
    #: Hex SHA-256 of the spec's canonical JSON (idempotency key cleared).
    spec_digest: str
    #: ``"approve"``, ``"reject"`` or ``"timed_out"``.
    outcome: str
    decided_at_ms: int
    expires_at_ms: int
    signature: bytes

    @property
    def decided_at(self) -> datetime.datetime:
        return _utc(self.decided_at_ms)

    @property
    def expires_at(self) -> datetime.datetime:
        return _utc(self.expires_at_ms)

    def signed_bytes(self) -> bytes:
        """The exact bytes the signature covers."""
        return (
            f"countersign-receipt/v1\n{self.tenant}\n{self.proposal_id}\n{self.spec_digest}\n"
            f"{self.outcome}\n{self.decided_at_ms}\n{self.expires_at_ms}\n"
        ).encode("utf-8")


@dataclass(frozen=True)
class GateResult:
    gate: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Vote:
    person: str
    key_id: str
    #: ``"approve"`` or ``"reject"``.
    verdict: str
    comment: str
    at: Optional[datetime.datetime]


@dataclass(frozen=True)
class Decision:
    """A proposal's decision. Agent credentials see ``agent_message`` only:
    ``reason``, gates and votes come empty."""

    #: ``"approve"``, ``"reject"``, ``"timed_out"``, or ``""`` while escalated.
    outcome: str
    reason: str
    agent_message: str
    sop_id: str
    sop_version: int
    rollback_path: str
    gates: Tuple[GateResult, ...]
    missing_gates: Tuple[str, ...]
    reviewer: str
    decided_at: Optional[datetime.datetime]
    summary: str
    sequence: int
    digest: str
    route_id: str
    votes: Tuple[Vote, ...]
    #: Present on approvals; what the gate verifies before it runs anything.
    receipt: Optional[Receipt]


@dataclass(frozen=True)
class Proposal:
    id: str
    tenant: str
    spec: Spec
    #: ``"pending"``, ``"reviewing"``, ``"escalated"``, ``"approved"``,
    #: ``"rejected"``, ``"cancelled"`` or ``"timed_out"``.
    state: str
    submitted_by: str
    submitted_by_person: str
    created_at: Optional[datetime.datetime]
    updated_at: Optional[datetime.datetime]
    decision: Optional[Decision]
    suppressed_retries: int
    cancel_reason: str

    @property
    def terminal(self) -> bool:
        """Whether the proposal is decided (no later state change)."""
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class SubmitResult:
    proposal: Proposal
    #: The idempotency key matched an earlier proposal with the same spec.
    deduplicated: bool
    #: An identical proposal was rejected moments ago: this is its rejection.
    suppressed: bool


@dataclass(frozen=True)
class Notification:
    """One event of the tenant's review stream."""

    #: The tenant's own event counter; resume after it with ``after_cursor``.
    cursor: int
    #: ``"submitted"``, ``"review_started"``, ``"approved"``, ``"rejected"``,
    #: ``"cancelled"``, ``"timed_out"``, ``"requeued"``, ``"suppressed"``,
    #: ``"breaker_tripped"``, ``"escalated"`` or ``"vote"``.
    event: str
    #: The proposal as this event left it.
    proposal: Optional[Proposal]
    emitted_at: Optional[datetime.datetime]


@dataclass(frozen=True)
class Approval:
    """A verified approval: the proposal and its receipt, checked against the
    spec that was submitted. A gated function runs only with one."""

    proposal: Proposal
    receipt: Receipt

    @property
    def proposal_id(self) -> str:
        return self.proposal.id
