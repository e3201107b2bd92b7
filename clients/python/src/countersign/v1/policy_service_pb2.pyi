from countersign.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutRouteRequest(_message.Message):
    __slots__ = ("route",)
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    route: _types_pb2.Route
    def __init__(self, route: _Optional[_Union[_types_pb2.Route, _Mapping]] = ...) -> None: ...

class ListRoutesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRoutesResponse(_message.Message):
    __slots__ = ("routes",)
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Route]
    def __init__(self, routes: _Optional[_Iterable[_Union[_types_pb2.Route, _Mapping]]] = ...) -> None: ...

class DeleteRouteRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class PutModelProfileRequest(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: _types_pb2.ModelProfile
    def __init__(self, profile: _Optional[_Union[_types_pb2.ModelProfile, _Mapping]] = ...) -> None: ...

class ListModelProfilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelProfilesResponse(_message.Message):
    __slots__ = ("profiles",)
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    profiles: _containers.RepeatedCompositeFieldContainer[_types_pb2.ModelProfile]
    def __init__(self, profiles: _Optional[_Iterable[_Union[_types_pb2.ModelProfile, _Mapping]]] = ...) -> None: ...

class DeleteModelProfileRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...
