"""Regenerates the protobuf and gRPC stubs the package ships
(`src/countersign/v1/`) from the repository's `proto/` with grpcio-tools.

    python scripts/generate_stubs.py            # rewrite src/countersign/v1
    python scripts/generate_stubs.py --out DIR  # write them to DIR instead

The proto files live in package `countersign.v1` under `countersign/v1/`, so
the generated modules import each other as `countersign.v1.*`: exactly where
this package puts them. The output depends on the grpcio-tools version
(pinned in requirements-test.txt); tests/test_stubs.py fails when the shipped
stubs differ from what it generates.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent
PROTO_ROOT = PACKAGE_ROOT.parent.parent / "proto"
STUBS = PACKAGE_ROOT / "src" / "countersign" / "v1"

INIT = '''"""Generated protobuf and gRPC stubs of `countersign.v1` (scripts/generate_stubs.py).

Internal to the package: its public API is `countersign`, which exposes no
protobuf or gRPC type.
"""
'''


def generate(out: Path) -> None:
    """Writes the stubs of every proto file under proto/countersign/v1 into
    `out` (which must not exist yet), with an `__init__.py`."""
    from grpc_tools import protoc  # only the generator needs grpcio-tools

    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "countersign" / "v1").glob("*.proto"))
    if not sources:
        raise SystemExit(f"no proto files under {PROTO_ROOT}/countersign/v1")
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--proto_path={well_known}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            f"--grpc_python_out={scratch}",
            *sources,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("grpc_tools.protoc failed")
        shutil.copytree(Path(scratch) / "countersign" / "v1", out)
    (out / "__init__.py").write_text(INIT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=STUBS, help="where to write them (default: %(default)s)")
    out = parser.parse_args().out.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "v1"
        generate(fresh)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(fresh, out)
    print(f"wrote {len(list(out.iterdir()))} files to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
