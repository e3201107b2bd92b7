"""Generated protobuf and gRPC stubs of `countersign.v1` (scripts/generate_stubs.py).

Internal to the package: its public API is `countersign`, which exposes no
protobuf or gRPC type.
"""
