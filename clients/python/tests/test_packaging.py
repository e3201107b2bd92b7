"""The package as users get it: Python 3.9 syntax, its metadata, and a wheel
that ships the typing marker and the stubs."""

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import countersign

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "src" / "countersign").rglob("*.py"))


def test_every_module_parses_as_python_3_9():
    # No `match`, no parenthesised context managers, no 3.10+ grammar; and no
    # `X | Y` annotation evaluated at runtime (`from __future__` is not used
    # to hide it).
    for path in SOURCES:
        tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                raise AssertionError(f"{path}: no __future__ imports")
            annotation = getattr(node, "annotation", None) or getattr(node, "returns", None)
            if annotation is not None:
                for part in ast.walk(annotation):
                    assert not isinstance(part, ast.BinOp), f"{path}:{node.lineno}: use Optional/Union"


def test_the_metadata_depends_only_on_grpcio_and_protobuf():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "countersign"
    assert project["version"] == countersign.__version__
    assert project["requires-python"] == ">=3.9"
    assert sorted(d.split(">")[0].split("=")[0] for d in project["dependencies"]) == ["grpcio", "protobuf"]


def test_the_wheel_ships_the_typing_marker_and_the_stubs(tmp_path):
    # Built from a copy: setuptools writes build/ and *.egg-info where it builds.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("countersign-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "countersign/py.typed" in names
    for stub in ("types_pb2.py", "types_pb2.pyi", "proposal_service_pb2_grpc.py", "__init__.py"):
        assert f"countersign/v1/{stub}" in names, stub
    assert not any(name.startswith("tests/") for name in names)
