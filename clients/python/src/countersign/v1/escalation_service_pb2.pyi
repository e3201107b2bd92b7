import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from countersign.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListEscalationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "action", "target", "route_id", "operator", "awaiting_me")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ROUTE_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    AWAITING_ME_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    action: str
    target: str
    route_id: str
    operator: str
    awaiting_me: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., route_id: _Optional[str] = ..., operator: _Optional[str] = ..., awaiting_me: bool = ...) -> None: ...

class ListEscalationsResponse(_message.Message):
    __slots__ = ("escalations", "next_page_token")
    ESCALATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    escalations: _containers.RepeatedCompositeFieldContainer[Escalation]
    next_page_token: str
    def __init__(self, escalations: _Optional[_Iterable[_Union[Escalation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Escalation(_message.Message):
    __slots__ = ("proposal", "route_id", "votes", "approvals_required", "expires_at")
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    ROUTE_ID_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    proposal: _types_pb2.Proposal
    route_id: str
    votes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Vote]
    approvals_required: int
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, proposal: _Optional[_Union[_types_pb2.Proposal, _Mapping]] = ..., route_id: _Optional[str] = ..., votes: _Optional[_Iterable[_Union[_types_pb2.Vote, _Mapping]]] = ..., approvals_required: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("proposal_id", "verdict", "comment")
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    proposal_id: str
    verdict: _types_pb2.Verdict
    comment: str
    def __init__(self, proposal_id: _Optional[str] = ..., verdict: _Optional[_Union[_types_pb2.Verdict, str]] = ..., comment: _Optional[str] = ...) -> None: ...
