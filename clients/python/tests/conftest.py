import os
import tempfile
from pathlib import Path
from typing import Iterator

# The tests start processes (the server, the example) while gRPC threads run;
# gRPC's fork handlers then abort some forked children before they exec. No
# child here uses the parent's gRPC state, so the handlers are off.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest  # noqa: E402

from support import Server  # noqa: E402


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
