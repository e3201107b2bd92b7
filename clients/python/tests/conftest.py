import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from support import Server


def _serve(*extra: str) -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="countersign-pytest-") as data:
        server = Server(Path(data), *extra)
        try:
            server.seed()
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """A server that reviews (its own fresh database, for the whole run)."""
    yield from _serve()


@pytest.fixture(scope="session")
def idle_server() -> Iterator[Server]:
    """A server with no reviewers: every proposal stays pending."""
    yield from _serve("--reviewers", "0")


@pytest.fixture(scope="session")
def coordinator(server: Server) -> str:
    return server.key("coordinator")


@pytest.fixture(scope="session")
def idle_coordinator(idle_server: Server) -> str:
    return idle_server.key("coordinator")
