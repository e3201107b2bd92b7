import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from countersign.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VerifyFailure(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERIFY_FAILURE_UNSPECIFIED: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_ALTERED: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_MISSING: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_REORDERED: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_TRUNCATED: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_CHECKPOINT_MISMATCH: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_BAD_SIGNATURE: _ClassVar[VerifyFailure]
    VERIFY_FAILURE_MISMATCH: _ClassVar[VerifyFailure]
VERIFY_FAILURE_UNSPECIFIED: VerifyFailure
VERIFY_FAILURE_ALTERED: VerifyFailure
VERIFY_FAILURE_MISSING: VerifyFailure
VERIFY_FAILURE_REORDERED: VerifyFailure
VERIFY_FAILURE_TRUNCATED: VerifyFailure
VERIFY_FAILURE_CHECKPOINT_MISMATCH: VerifyFailure
VERIFY_FAILURE_BAD_SIGNATURE: VerifyFailure
VERIFY_FAILURE_MISMATCH: VerifyFailure

class ListDecisionsRequest(_message.Message):
    __slots__ = ("decided_from", "decided_until", "action", "target", "operator", "submitted_by", "outcome", "blast_radius", "sop_id", "page_size", "page_token")
    DECIDED_FROM_FIELD_NUMBER: _ClassVar[int]
    DECIDED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    BLAST_RADIUS_FIELD_NUMBER: _ClassVar[int]
    SOP_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    decided_from: _timestamp_pb2.Timestamp
    decided_until: _timestamp_pb2.Timestamp
    action: str
    target: str
    operator: str
    submitted_by: str
    outcome: _types_pb2.DecisionOutcome
    blast_radius: _types_pb2.BlastRadius
    sop_id: str
    page_size: int
    page_token: str
    def __init__(self, decided_from: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decided_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., operator: _Optional[str] = ..., submitted_by: _Optional[str] = ..., outcome: _Optional[_Union[_types_pb2.DecisionOutcome, str]] = ..., blast_radius: _Optional[_Union[_types_pb2.BlastRadius, str]] = ..., sop_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDecisionsResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("sequence", "digest", "proposal_id", "tenant", "action", "target", "operator", "submitted_by", "blast_radius", "decision", "record_json")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    BLAST_RADIUS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    digest: str
    proposal_id: str
    tenant: str
    action: str
    target: str
    operator: str
    submitted_by: str
    blast_radius: _types_pb2.BlastRadius
    decision: _types_pb2.Decision
    record_json: str
    def __init__(self, sequence: _Optional[int] = ..., digest: _Optional[str] = ..., proposal_id: _Optional[str] = ..., tenant: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., operator: _Optional[str] = ..., submitted_by: _Optional[str] = ..., blast_radius: _Optional[_Union[_types_pb2.BlastRadius, str]] = ..., decision: _Optional[_Union[_types_pb2.Decision, _Mapping]] = ..., record_json: _Optional[str] = ...) -> None: ...

class GetDecisionRequest(_message.Message):
    __slots__ = ("proposal_id",)
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    proposal_id: str
    def __init__(self, proposal_id: _Optional[str] = ...) -> None: ...

class VerifyLogRequest(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class VerifyLogResponse(_message.Message):
    __slots__ = ("ok", "entries_checked", "head_digest", "first_invalid_sequence", "failure", "detail", "column")
    OK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_CHECKED_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    FIRST_INVALID_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    entries_checked: int
    head_digest: str
    first_invalid_sequence: int
    failure: VerifyFailure
    detail: str
    column: str
    def __init__(self, ok: bool = ..., entries_checked: _Optional[int] = ..., head_digest: _Optional[str] = ..., first_invalid_sequence: _Optional[int] = ..., failure: _Optional[_Union[VerifyFailure, str]] = ..., detail: _Optional[str] = ..., column: _Optional[str] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("refresh",)
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    refresh: bool
    def __init__(self, refresh: bool = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("tenant", "size", "head_digest", "signed_at_ms", "public_key", "signature")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    size: int
    head_digest: str
    signed_at_ms: int
    public_key: str
    signature: str
    def __init__(self, tenant: _Optional[str] = ..., size: _Optional[int] = ..., head_digest: _Optional[str] = ..., signed_at_ms: _Optional[int] = ..., public_key: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...
