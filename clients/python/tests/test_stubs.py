"""The stubs shipped in src/countersign/v1 are what scripts/generate_stubs.py
makes from proto/ now: a change to a .proto without regenerating fails here."""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "src" / "countersign" / "v1"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_stubs", HERE.parent / "scripts" / "generate_stubs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_stubs"] = module
    spec.loader.exec_module(module)
    return module


def test_the_shipped_stubs_are_generated_from_the_current_protos(tmp_path):
    fresh = tmp_path / "v1"
    _generator().generate(fresh)
    generated = {p.name: p.read_bytes() for p in fresh.iterdir()}
    shipped = {p.name: p.read_bytes() for p in SHIPPED.iterdir() if p.name != "__pycache__"}
    assert sorted(shipped) == sorted(generated), "files differ: run scripts/generate_stubs.py"
    stale = [name for name in generated if generated[name] != shipped[name]]
    assert not stale, f"stale against proto/: {stale}; run clients/python/scripts/generate_stubs.py"


def test_every_proto_file_has_its_stubs():
    protos = sorted(p.stem for p in (HERE.parents[2] / "proto" / "countersign" / "v1").glob("*.proto"))
    assert protos
    for stem in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert (SHIPPED / f"{stem}{suffix}").is_file(), stem + suffix
