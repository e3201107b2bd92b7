import datetime

from countersign.v1 import types_pb2 as _types_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitRequest(_message.Message):
    __slots__ = ("spec", "wait_for_decision")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_DECISION_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.ProposalSpec
    wait_for_decision: _duration_pb2.Duration
    def __init__(self, spec: _Optional[_Union[_types_pb2.ProposalSpec, _Mapping]] = ..., wait_for_decision: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("proposal", "deduplicated", "suppressed")
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    proposal: _types_pb2.Proposal
    deduplicated: bool
    suppressed: bool
    def __init__(self, proposal: _Optional[_Union[_types_pb2.Proposal, _Mapping]] = ..., deduplicated: bool = ..., suppressed: bool = ...) -> None: ...

class GetProposalRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelProposalRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AwaitDecisionRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...
