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

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_SUBMITTED: _ClassVar[EventKind]
    EVENT_KIND_REVIEW_STARTED: _ClassVar[EventKind]
    EVENT_KIND_APPROVED: _ClassVar[EventKind]
    EVENT_KIND_REJECTED: _ClassVar[EventKind]
    EVENT_KIND_CANCELLED: _ClassVar[EventKind]
    EVENT_KIND_TIMED_OUT: _ClassVar[EventKind]
    EVENT_KIND_REQUEUED: _ClassVar[EventKind]
    EVENT_KIND_SUPPRESSED: _ClassVar[EventKind]
    EVENT_KIND_BREAKER_TRIPPED: _ClassVar[EventKind]
    EVENT_KIND_ESCALATED: _ClassVar[EventKind]
    EVENT_KIND_VOTE: _ClassVar[EventKind]
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_SUBMITTED: EventKind
EVENT_KIND_REVIEW_STARTED: EventKind
EVENT_KIND_APPROVED: EventKind
EVENT_KIND_REJECTED: EventKind
EVENT_KIND_CANCELLED: EventKind
EVENT_KIND_TIMED_OUT: EventKind
EVENT_KIND_REQUEUED: EventKind
EVENT_KIND_SUPPRESSED: EventKind
EVENT_KIND_BREAKER_TRIPPED: EventKind
EVENT_KIND_ESCALATED: EventKind
EVENT_KIND_VOTE: EventKind

class WatchRequest(_message.Message):
    __slots__ = ("after_cursor", "proposal_ids", "operator", "terminal_only")
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_IDS_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    after_cursor: int
    proposal_ids: _containers.RepeatedScalarFieldContainer[str]
    operator: str
    terminal_only: bool
    def __init__(self, after_cursor: _Optional[int] = ..., proposal_ids: _Optional[_Iterable[str]] = ..., operator: _Optional[str] = ..., terminal_only: bool = ...) -> None: ...

class Notification(_message.Message):
    __slots__ = ("cursor", "event", "proposal", "emitted_at", "heartbeat")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    EMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    event: EventKind
    proposal: _types_pb2.Proposal
    emitted_at: _timestamp_pb2.Timestamp
    heartbeat: bool
    def __init__(self, cursor: _Optional[int] = ..., event: _Optional[_Union[EventKind, str]] = ..., proposal: _Optional[_Union[_types_pb2.Proposal, _Mapping]] = ..., emitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heartbeat: bool = ...) -> None: ...
