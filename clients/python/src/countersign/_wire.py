"""Conversions between the package's types and the generated protobuf
messages, and from gRPC errors to the package's exceptions."""

import datetime
from typing import Any, Dict, Mapping, Optional, Type

import grpc
from google.protobuf import struct_pb2

from countersign import _errors
from countersign._types import (
    BLAST_RADII,
    CLASSES,
    Decision,
    GateResult,
    Notification,
    Proposal,
    Receipt,
    Spec,
    SubmitResult,
    Vote,
)
from countersign.v1 import notification_service_pb2, proposal_service_pb2, types_pb2

_CLASS_TO_WIRE = {
    "read": types_pb2.OPERATION_CLASS_READ,
    "write": types_pb2.OPERATION_CLASS_WRITE,
    "destructive": types_pb2.OPERATION_CLASS_DESTRUCTIVE,
}
_BLAST_RADIUS_TO_WIRE = {
    "single_device": types_pb2.BLAST_RADIUS_SINGLE_DEVICE,
    "cluster": types_pb2.BLAST_RADIUS_CLUSTER,
    "tenant_wide": types_pb2.BLAST_RADIUS_TENANT_WIDE,
}


class _Names:
    """An enum's values by their names without the prefix, lower-case
    (`PROPOSAL_STATE_APPROVED` -> `approved`); "" for the zero value and
    `unknown(N)` for a value this build does not know."""

    def __init__(self, enum: Any, prefix: str) -> None:
        self._names = {
            value.number: value.name[len(prefix) :].lower() for value in enum.DESCRIPTOR.values if value.number
        }
        self._names[0] = ""

    def __call__(self, value: int) -> str:
        name = self._names.get(value)
        return f"unknown({value})" if name is None else name


_CLASS = _Names(types_pb2.OperationClass, "OPERATION_CLASS_")
_BLAST_RADIUS = _Names(types_pb2.BlastRadius, "BLAST_RADIUS_")
_STATE = _Names(types_pb2.ProposalState, "PROPOSAL_STATE_")
_OUTCOME = _Names(types_pb2.DecisionOutcome, "DECISION_OUTCOME_")
_VERDICT = _Names(types_pb2.Verdict, "VERDICT_")
_EVENT = _Names(notification_service_pb2.EventKind, "EVENT_KIND_")


def check_class(cls: str) -> None:
    if cls not in CLASSES:
        raise ValueError(f"cls: must be one of {', '.join(CLASSES)} (got {cls!r})")


def check_blast_radius(blast_radius: str) -> None:
    if blast_radius not in BLAST_RADII:
        raise ValueError(f"blast_radius: must be one of {', '.join(BLAST_RADII)} (got {blast_radius!r})")


def spec_to_wire(spec: Spec) -> types_pb2.ProposalSpec:
    check_class(spec.cls)
    check_blast_radius(spec.blast_radius)
    wire = types_pb2.ProposalSpec(
        action=spec.action,
        target=spec.target,
        reason=spec.reason,
        blast_radius=_BLAST_RADIUS_TO_WIRE[spec.blast_radius],
        operator=spec.operator,
        context_summary=spec.context_summary,
        incident_id=spec.incident_id,
        labels=dict(spec.labels),
        rollback_plan=spec.rollback_plan,
        force_approve_no_sop=spec.force_approve_no_sop,
        idempotency_key=spec.idempotency_key,
    )
    setattr(wire, "class", _CLASS_TO_WIRE[spec.cls])
    try:
        wire.parameters.update(dict(spec.parameters))
    except (TypeError, ValueError) as error:
        raise ValueError(f"parameters: {error}") from None
    return wire


def _json(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return _object(value.struct_value)
    if kind == "list_value":
        return [_json(item) for item in value.list_value.values]
    if kind is None or kind == "null_value":
        return None
    return getattr(value, kind)


def _object(struct: struct_pb2.Struct) -> Dict[str, Any]:
    return {key: _json(value) for key, value in struct.fields.items()}


def spec_from_wire(wire: types_pb2.ProposalSpec) -> Spec:
    return Spec(
        wire.action,
        wire.target,
        _BLAST_RADIUS(wire.blast_radius),
        wire.reason,
        _CLASS(getattr(wire, "class")),
        _object(wire.parameters),
        wire.operator,
        wire.context_summary,
        wire.incident_id,
        dict(wire.labels),
        wire.rollback_plan,
        wire.force_approve_no_sop,
        wire.idempotency_key,
    )


_UTC = datetime.timezone.utc
_from_timestamp = datetime.datetime.fromtimestamp


def _at(timestamp: Any) -> datetime.datetime:
    """A present Timestamp as an aware UTC datetime, to the millisecond."""
    return _from_timestamp((timestamp.seconds * 1000 + timestamp.nanos // 1_000_000) / 1000, tz=_UTC)


def _time(message: Any, field: str) -> Optional[datetime.datetime]:
    return _at(getattr(message, field)) if message.HasField(field) else None


def _signature(text: str) -> bytes:
    # A malformed signature is no signature: it verifies against nothing.
    try:
        return bytes.fromhex(text)
    except ValueError:
        return b""


def _receipt(decision: types_pb2.Decision) -> Optional[Receipt]:
    if not decision.HasField("receipt"):
        return None
    wire = decision.receipt
    return Receipt(
        wire.tenant,
        wire.proposal_id,
        wire.spec_digest,
        wire.outcome,
        wire.decided_at,
        wire.expires_at,
        _signature(wire.signature),
    )


def _vote(wire: types_pb2.Vote) -> Vote:
    return Vote(wire.person, wire.key_id, _VERDICT(wire.verdict), wire.comment, _time(wire, "at"))


def decision_from_wire(wire: types_pb2.Decision) -> Decision:
    # Positional arguments in the order of Decision's fields (keywords cost
    # a lookup each, and this runs once per answer).
    return Decision(
        _OUTCOME(wire.outcome),
        wire.reason,
        wire.agent_message,
        wire.sop_id,
        wire.sop_version,
        wire.rollback_path,
        tuple([GateResult(g.gate, g.passed, g.detail) for g in wire.gates]),
        tuple(wire.missing_gates),
        wire.reviewer,
        _time(wire, "decided_at"),
        wire.summary,
        wire.sequence,
        wire.digest,
        wire.route_id,
        tuple([_vote(v) for v in wire.votes]),
        _receipt(wire),
    )


# Each field of a Proposal from its message. The whole conversion costs tens
# of microseconds of the GIL an answer (the spec, every gate, the receipt);
# a caller that reads only `state` should not pay for the rest.
_PROPOSAL_FIELDS: Mapping[str, Any] = {
    "id": lambda wire: wire.id,
    "tenant": lambda wire: wire.tenant,
    "spec": lambda wire: spec_from_wire(wire.spec),
    "state": lambda wire: _STATE(wire.state),
    "submitted_by": lambda wire: wire.submitted_by,
    "submitted_by_person": lambda wire: wire.submitted_by_person,
    "created_at": lambda wire: _time(wire, "created_at"),
    "updated_at": lambda wire: _time(wire, "updated_at"),
    "decision": lambda wire: decision_from_wire(wire.decision) if wire.HasField("decision") else None,
    "suppressed_retries": lambda wire: wire.suppressed_retries,
    "cancel_reason": lambda wire: wire.cancel_reason,
}
_PROPOSAL_NAMES = tuple(_PROPOSAL_FIELDS)


class _ProposalFromWire(Proposal):
    """A :class:`Proposal` read from an answer: each field is converted from
    the message the first time it is read, then kept. Frozen, equal to and
    hashed as the Proposal with the same fields, and printed as one."""

    __qualname__ = "Proposal"

    def __getattr__(self, name: str) -> Any:
        # Only for attributes not yet set: a field not read before.
        convert = _PROPOSAL_FIELDS.get(name)
        wire = self.__dict__.get("_wire")
        if convert is None or wire is None:
            raise AttributeError(name)
        value = convert(wire)
        object.__setattr__(self, name, value)
        return value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Proposal):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _PROPOSAL_NAMES)

    __hash__ = Proposal.__hash__


def proposal_from_wire(wire: types_pb2.Proposal) -> Proposal:
    proposal = object.__new__(_ProposalFromWire)
    object.__setattr__(proposal, "_wire", wire)
    return proposal


def submit_result(response: proposal_service_pb2.SubmitResponse) -> SubmitResult:
    return SubmitResult(proposal_from_wire(response.proposal), response.deduplicated, response.suppressed)


def notification_from_wire(wire: notification_service_pb2.Notification) -> Notification:
    return Notification(
        cursor=wire.cursor,
        event=_EVENT(wire.event),
        proposal=proposal_from_wire(wire.proposal) if wire.HasField("proposal") else None,
        emitted_at=_time(wire, "emitted_at"),
    )


_ERRORS: Mapping[grpc.StatusCode, Type[_errors.CountersignError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: _errors.InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: _errors.Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: _errors.PermissionDenied,
    grpc.StatusCode.NOT_FOUND: _errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: _errors.AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: _errors.FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: _errors.ResourceExhausted,
    grpc.StatusCode.OUT_OF_RANGE: _errors.OutOfRange,
    grpc.StatusCode.UNAVAILABLE: _errors.Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: _errors.DeadlineExceeded,
}


def status_code(error: grpc.RpcError) -> grpc.StatusCode:
    code = error.code() if callable(getattr(error, "code", None)) else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def status_details(error: grpc.RpcError) -> str:
    details = error.details() if callable(getattr(error, "details", None)) else None
    return details or ""


def error_from_rpc(error: grpc.RpcError, proposal_id: Optional[str] = None) -> _errors.CountersignError:
    """The package's exception for a failed call."""
    code = status_code(error)
    kind = _ERRORS.get(code, _errors.CountersignError)
    name = code.name
    return kind(f"{name}: {status_details(error)}", code=name, proposal_id=proposal_id)
