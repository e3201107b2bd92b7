import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BlastRadius(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLAST_RADIUS_UNSPECIFIED: _ClassVar[BlastRadius]
    BLAST_RADIUS_SINGLE_DEVICE: _ClassVar[BlastRadius]
    BLAST_RADIUS_CLUSTER: _ClassVar[BlastRadius]
    BLAST_RADIUS_TENANT_WIDE: _ClassVar[BlastRadius]

class OperationClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_CLASS_UNSPECIFIED: _ClassVar[OperationClass]
    OPERATION_CLASS_READ: _ClassVar[OperationClass]
    OPERATION_CLASS_WRITE: _ClassVar[OperationClass]
    OPERATION_CLASS_DESTRUCTIVE: _ClassVar[OperationClass]

class ProposalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROPOSAL_STATE_UNSPECIFIED: _ClassVar[ProposalState]
    PROPOSAL_STATE_PENDING: _ClassVar[ProposalState]
    PROPOSAL_STATE_REVIEWING: _ClassVar[ProposalState]
    PROPOSAL_STATE_APPROVED: _ClassVar[ProposalState]
    PROPOSAL_STATE_REJECTED: _ClassVar[ProposalState]
    PROPOSAL_STATE_CANCELLED: _ClassVar[ProposalState]
    PROPOSAL_STATE_TIMED_OUT: _ClassVar[ProposalState]
    PROPOSAL_STATE_ESCALATED: _ClassVar[ProposalState]

class DecisionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_OUTCOME_UNSPECIFIED: _ClassVar[DecisionOutcome]
    DECISION_OUTCOME_APPROVE: _ClassVar[DecisionOutcome]
    DECISION_OUTCOME_REJECT: _ClassVar[DecisionOutcome]
    DECISION_OUTCOME_TIMED_OUT: _ClassVar[DecisionOutcome]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_APPROVE: _ClassVar[Verdict]
    VERDICT_REJECT: _ClassVar[Verdict]

class TargetStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TARGET_STATUS_UNSPECIFIED: _ClassVar[TargetStatus]
    TARGET_STATUS_ONLINE: _ClassVar[TargetStatus]
    TARGET_STATUS_OFFLINE: _ClassVar[TargetStatus]
    TARGET_STATUS_RESTART_LOOP: _ClassVar[TargetStatus]
    TARGET_STATUS_MAINTENANCE: _ClassVar[TargetStatus]

class OnUnsure(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ON_UNSURE_UNSPECIFIED: _ClassVar[OnUnsure]
    ON_UNSURE_REJECT: _ClassVar[OnUnsure]
    ON_UNSURE_ESCALATE: _ClassVar[OnUnsure]
BLAST_RADIUS_UNSPECIFIED: BlastRadius
BLAST_RADIUS_SINGLE_DEVICE: BlastRadius
BLAST_RADIUS_CLUSTER: BlastRadius
BLAST_RADIUS_TENANT_WIDE: BlastRadius
OPERATION_CLASS_UNSPECIFIED: OperationClass
OPERATION_CLASS_READ: OperationClass
OPERATION_CLASS_WRITE: OperationClass
OPERATION_CLASS_DESTRUCTIVE: OperationClass
PROPOSAL_STATE_UNSPECIFIED: ProposalState
PROPOSAL_STATE_PENDING: ProposalState
PROPOSAL_STATE_REVIEWING: ProposalState
PROPOSAL_STATE_APPROVED: ProposalState
PROPOSAL_STATE_REJECTED: ProposalState
PROPOSAL_STATE_CANCELLED: ProposalState
PROPOSAL_STATE_TIMED_OUT: ProposalState
PROPOSAL_STATE_ESCALATED: ProposalState
DECISION_OUTCOME_UNSPECIFIED: DecisionOutcome
DECISION_OUTCOME_APPROVE: DecisionOutcome
DECISION_OUTCOME_REJECT: DecisionOutcome
DECISION_OUTCOME_TIMED_OUT: DecisionOutcome
VERDICT_UNSPECIFIED: Verdict
VERDICT_APPROVE: Verdict
VERDICT_REJECT: Verdict
TARGET_STATUS_UNSPECIFIED: TargetStatus
TARGET_STATUS_ONLINE: TargetStatus
TARGET_STATUS_OFFLINE: TargetStatus
TARGET_STATUS_RESTART_LOOP: TargetStatus
TARGET_STATUS_MAINTENANCE: TargetStatus
ON_UNSURE_UNSPECIFIED: OnUnsure
ON_UNSURE_REJECT: OnUnsure
ON_UNSURE_ESCALATE: OnUnsure

class ProposalSpec(_message.Message):
    __slots__ = ("action", "target", "parameters", "reason", "blast_radius", "operator", "context_summary", "incident_id", "labels", "rollback_plan", "force_approve_no_sop", "idempotency_key")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CLASS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BLAST_RADIUS_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    INCIDENT_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_PLAN_FIELD_NUMBER: _ClassVar[int]
    FORCE_APPROVE_NO_SOP_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    action: str
    target: str
    parameters: _struct_pb2.Struct
    reason: str
    blast_radius: BlastRadius
    operator: str
    context_summary: str
    incident_id: str
    labels: _containers.ScalarMap[str, str]
    rollback_plan: str
    force_approve_no_sop: bool
    idempotency_key: str
    def __init__(self, action: _Optional[str] = ..., target: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., reason: _Optional[str] = ..., blast_radius: _Optional[_Union[BlastRadius, str]] = ..., operator: _Optional[str] = ..., context_summary: _Optional[str] = ..., incident_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., rollback_plan: _Optional[str] = ..., force_approve_no_sop: bool = ..., idempotency_key: _Optional[str] = ..., **kwargs) -> None: ...

class GateResult(_message.Message):
    __slots__ = ("gate", "passed", "detail")
    GATE_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    gate: str
    passed: bool
    detail: str
    def __init__(self, gate: _Optional[str] = ..., passed: bool = ..., detail: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("outcome", "reason", "agent_message", "sop_id", "sop_version", "rollback_path", "gates", "missing_gates", "reviewer", "decided_at", "summary", "sequence", "digest", "review_latency_ms", "route_id", "votes", "model", "receipt")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AGENT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SOP_ID_FIELD_NUMBER: _ClassVar[int]
    SOP_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_PATH_FIELD_NUMBER: _ClassVar[int]
    GATES_FIELD_NUMBER: _ClassVar[int]
    MISSING_GATES_FIELD_NUMBER: _ClassVar[int]
    REVIEWER_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    REVIEW_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_ID_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    outcome: DecisionOutcome
    reason: str
    agent_message: str
    sop_id: str
    sop_version: int
    rollback_path: str
    gates: _containers.RepeatedCompositeFieldContainer[GateResult]
    missing_gates: _containers.RepeatedScalarFieldContainer[str]
    reviewer: str
    decided_at: _timestamp_pb2.Timestamp
    summary: str
    sequence: int
    digest: str
    review_latency_ms: int
    route_id: str
    votes: _containers.RepeatedCompositeFieldContainer[Vote]
    model: ModelReview
    receipt: Receipt
    def __init__(self, outcome: _Optional[_Union[DecisionOutcome, str]] = ..., reason: _Optional[str] = ..., agent_message: _Optional[str] = ..., sop_id: _Optional[str] = ..., sop_version: _Optional[int] = ..., rollback_path: _Optional[str] = ..., gates: _Optional[_Iterable[_Union[GateResult, _Mapping]]] = ..., missing_gates: _Optional[_Iterable[str]] = ..., reviewer: _Optional[str] = ..., decided_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., summary: _Optional[str] = ..., sequence: _Optional[int] = ..., digest: _Optional[str] = ..., review_latency_ms: _Optional[int] = ..., route_id: _Optional[str] = ..., votes: _Optional[_Iterable[_Union[Vote, _Mapping]]] = ..., model: _Optional[_Union[ModelReview, _Mapping]] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("tenant", "proposal_id", "spec_digest", "outcome", "decided_at", "expires_at", "signature")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    proposal_id: str
    spec_digest: str
    outcome: str
    decided_at: int
    expires_at: int
    signature: str
    def __init__(self, tenant: _Optional[str] = ..., proposal_id: _Optional[str] = ..., spec_digest: _Optional[str] = ..., outcome: _Optional[str] = ..., decided_at: _Optional[int] = ..., expires_at: _Optional[int] = ..., signature: _Optional[str] = ...) -> None: ...

class Proposal(_message.Message):
    __slots__ = ("id", "tenant", "spec", "state", "submitted_by", "created_at", "updated_at", "decision", "suppressed_retries", "cancel_reason", "submitted_by_person")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_RETRIES_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REASON_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_PERSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    spec: ProposalSpec
    state: ProposalState
    submitted_by: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    decision: Decision
    suppressed_retries: int
    cancel_reason: str
    submitted_by_person: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., spec: _Optional[_Union[ProposalSpec, _Mapping]] = ..., state: _Optional[_Union[ProposalState, str]] = ..., submitted_by: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., suppressed_retries: _Optional[int] = ..., cancel_reason: _Optional[str] = ..., submitted_by_person: _Optional[str] = ...) -> None: ...

class Vote(_message.Message):
    __slots__ = ("person", "key_id", "verdict", "comment", "at")
    PERSON_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    person: str
    key_id: str
    verdict: Verdict
    comment: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, person: _Optional[str] = ..., key_id: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., comment: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RouteMatch(_message.Message):
    __slots__ = ("actions", "classes", "blast_radii", "target_selector")
    class TargetSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    BLAST_RADII_FIELD_NUMBER: _ClassVar[int]
    TARGET_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedScalarFieldContainer[str]
    classes: _containers.RepeatedScalarFieldContainer[OperationClass]
    blast_radii: _containers.RepeatedScalarFieldContainer[BlastRadius]
    target_selector: _containers.ScalarMap[str, str]
    def __init__(self, actions: _Optional[_Iterable[str]] = ..., classes: _Optional[_Iterable[_Union[OperationClass, str]]] = ..., blast_radii: _Optional[_Iterable[_Union[BlastRadius, str]]] = ..., target_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Route(_message.Message):
    __slots__ = ("id", "match", "approvals_required", "approver_roles", "expires_after", "escalate_on")
    ID_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    APPROVER_ROLES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AFTER_FIELD_NUMBER: _ClassVar[int]
    ESCALATE_ON_FIELD_NUMBER: _ClassVar[int]
    id: str
    match: RouteMatch
    approvals_required: int
    approver_roles: _containers.RepeatedScalarFieldContainer[str]
    expires_after: _duration_pb2.Duration
    escalate_on: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., match: _Optional[_Union[RouteMatch, _Mapping]] = ..., approvals_required: _Optional[int] = ..., approver_roles: _Optional[_Iterable[str]] = ..., expires_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., escalate_on: _Optional[_Iterable[str]] = ...) -> None: ...

class Sop(_message.Message):
    __slots__ = ("id", "action", "title", "covers", "rollback_path", "max_blast_radius", "selector", "version", "retired", "updated_at")
    class SelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    COVERS_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_BLAST_RADIUS_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    action: str
    title: str
    covers: str
    rollback_path: str
    max_blast_radius: BlastRadius
    selector: _containers.ScalarMap[str, str]
    version: int
    retired: bool
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., action: _Optional[str] = ..., title: _Optional[str] = ..., covers: _Optional[str] = ..., rollback_path: _Optional[str] = ..., max_blast_radius: _Optional[_Union[BlastRadius, str]] = ..., selector: _Optional[_Mapping[str, str]] = ..., version: _Optional[int] = ..., retired: bool = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Target(_message.Message):
    __slots__ = ("id", "status", "labels", "updated_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: TargetStatus
    labels: _containers.ScalarMap[str, str]
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[TargetStatus, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ModelProfile(_message.Message):
    __slots__ = ("id", "match", "endpoint", "on_unsure", "calls_per_minute")
    ID_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    ON_UNSURE_FIELD_NUMBER: _ClassVar[int]
    CALLS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    id: str
    match: RouteMatch
    endpoint: str
    on_unsure: OnUnsure
    calls_per_minute: int
    def __init__(self, id: _Optional[str] = ..., match: _Optional[_Union[RouteMatch, _Mapping]] = ..., endpoint: _Optional[str] = ..., on_unsure: _Optional[_Union[OnUnsure, str]] = ..., calls_per_minute: _Optional[int] = ...) -> None: ...

class ModelReview(_message.Message):
    __slots__ = ("profile_id", "endpoint", "model", "verdict", "latency_ms", "prompt_tokens", "completion_tokens", "cached_prompt_tokens")
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    profile_id: str
    endpoint: str
    model: str
    verdict: str
    latency_ms: int
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    def __init__(self, profile_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., model: _Optional[str] = ..., verdict: _Optional[str] = ..., latency_ms: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...
