from countersign.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutSopRequest(_message.Message):
    __slots__ = ("sop",)
    SOP_FIELD_NUMBER: _ClassVar[int]
    sop: _types_pb2.Sop
    def __init__(self, sop: _Optional[_Union[_types_pb2.Sop, _Mapping]] = ...) -> None: ...

class GetSopRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListSopsRequest(_message.Message):
    __slots__ = ("include_retired", "page_size", "page_token")
    INCLUDE_RETIRED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    include_retired: bool
    page_size: int
    page_token: str
    def __init__(self, include_retired: bool = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSopsResponse(_message.Message):
    __slots__ = ("sops", "next_page_token")
    SOPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sops: _containers.RepeatedCompositeFieldContainer[_types_pb2.Sop]
    next_page_token: str
    def __init__(self, sops: _Optional[_Iterable[_Union[_types_pb2.Sop, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetireSopRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class PutTargetRequest(_message.Message):
    __slots__ = ("target",)
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: _types_pb2.Target
    def __init__(self, target: _Optional[_Union[_types_pb2.Target, _Mapping]] = ...) -> None: ...

class GetTargetRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListTargetsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTargetsResponse(_message.Message):
    __slots__ = ("targets", "next_page_token")
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[_types_pb2.Target]
    next_page_token: str
    def __init__(self, targets: _Optional[_Iterable[_Union[_types_pb2.Target, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
