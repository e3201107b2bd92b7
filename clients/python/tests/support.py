"""Test support: the real `countersign` binary on a free port with a fresh
data directory, seeding through the generated stubs, an Ed25519 signer (for
receipts the tests forge with the server's own key), and a tampering proxy."""

import hashlib
import itertools
import os
import signal
import socket
import subprocess
import threading
from concurrent import futures
from pathlib import Path
from typing import Callable, List, Optional

import grpc

from countersign import _ed25519
from countersign.v1 import (
    audit_service_pb2_grpc,
    proposal_service_pb2_grpc,
    reference_services_pb2,
    reference_services_pb2_grpc,
    types_pb2,
)

REPO = Path(__file__).resolve().parents[3]
BIN = os.environ.get("COUNTERSIGN_BIN") or str(REPO / "target" / "debug" / "countersign")

#: The action the tests' SOP covers (single device to tenant wide, on
#: targets labelled env=pytest).
ACTION = "py_restart_service"

_names = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test uses (targets, reasons, keys)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`countersign serve` in `data_dir` on 127.0.0.1:`port`; restartable on
    the same port and data (a client reconnects to the same endpoint)."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.extra = extra
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: Optional[subprocess.Popen] = None
        self.start()
        keys = data_dir / "countersign-data"
        self.admin_key = (keys / "admin.key").read_text().strip()
        self.public_key = self.admin("signing-key", "show")
        self.signing_seed = bytes.fromhex((keys / "signing.key").read_text().strip())

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
        env["COUNTERSIGN_METRICS_LISTEN"] = "127.0.0.1:0"
        env["COUNTERSIGN_CONSOLE_LISTEN"] = "127.0.0.1:0"
        return env

    def start(self) -> None:
        log = open(self.data_dir / "serve.log", "ab")
        self.process = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{self.port}", *self.extra],
            cwd=self.data_dir,
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=log,
        )
        log.close()
        assert self.process.stdout is not None
        first = self.process.stdout.readline().decode()
        if not first.startswith("countersign listening on "):
            self.process.kill()
            raise RuntimeError(f"serve did not start: {first!r}; see {self.data_dir / 'serve.log'}")
        # Then the metrics endpoint's line and the console's (its URL).
        self.process.stdout.readline()
        self.console_url = self.process.stdout.readline().decode().strip().removeprefix("countersign console on ")
        stdout = self.process.stdout
        threading.Thread(target=lambda: stdout.read(), daemon=True).start()

    def stop(self, how: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(how)
            self.process.wait(timeout=60)
        self.process = None

    def admin(self, *args: str) -> str:
        """`countersign admin ARGS` on this server's database; its stdout."""
        done = subprocess.run(
            [BIN, "admin", *args], cwd=self.data_dir, env=self._env(), capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"countersign admin {' '.join(args)}: {done.stderr}")
        return done.stdout.strip()

    def key(self, role: str, *extra: str) -> str:
        return self.admin("key", "create", "--tenant", "default", "--role", role, "--name", unique(role), *extra)

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"127.0.0.1:{self.port}")

    def seed(self) -> None:
        """The tests' SOP, and no breaker (the tests reject a lot)."""
        self.admin("tenant", "set", "default", "--breaker-threshold", "0")
        self.put_sop("SOP-PY", ACTION, selector={"env": "pytest"})

    def put_sop(self, sop_id: str, action: str, selector: Optional[dict] = None) -> None:
        """An SOP for `action` on targets with `selector`'s labels, up to
        tenant-wide, with a rollback path."""
        sop = types_pb2.Sop(
            id=sop_id,
            action=action,
            title=f"{action} (tests)",
            rollback_path="start it again",
            max_blast_radius=types_pb2.BLAST_RADIUS_TENANT_WIDE,
            selector=selector or {},
        )
        with self.channel() as channel:
            sops = reference_services_pb2_grpc.SopServiceStub(channel)
            sops.PutSop(reference_services_pb2.PutSopRequest(sop=sop), metadata=self.auth())

    def auth(self) -> tuple:
        return (("authorization", f"Bearer {self.admin_key}"),)

    def target(self, prefix: str = "node") -> str:
        """A new ONLINE target the tests' SOP covers, alone in its cluster (a
        cluster operation on it overlaps no other test's proposals)."""
        name = unique(prefix)
        self.put_target(name, {"env": "pytest", "cluster": name})
        return name

    def put_target(self, name: str, labels: dict) -> None:
        with self.channel() as channel:
            targets = reference_services_pb2_grpc.TargetServiceStub(channel)
            target = types_pb2.Target(id=name, status=types_pb2.TARGET_STATUS_ONLINE, labels=labels)
            targets.PutTarget(reference_services_pb2.PutTargetRequest(target=target), metadata=self.auth())


# Ed25519 signing (RFC 8032, 5.1.6) over the package's verifier's arithmetic:
# the tests forge receipts with the server's own key, so that only the check
# under test can refuse them.


def _encode(point: tuple) -> bytes:
    inverse = pow(point[2], _ed25519._P - 2, _ed25519._P)
    x, y = point[0] * inverse % _ed25519._P, point[1] * inverse % _ed25519._P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _scalar(s: int) -> tuple:
    return _ed25519._combination(s, _ed25519._BASE, 0, _ed25519._IDENTITY)


def _expand(seed: bytes) -> tuple:
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def public_key(seed: bytes) -> bytes:
    return _encode(_scalar(_expand(seed)[0]))


def sign(seed: bytes, message: bytes) -> bytes:
    a, prefix = _expand(seed)
    public = _encode(_scalar(a))
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % _ed25519._L
    big_r = _encode(_scalar(r))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % _ed25519._L
    return big_r + ((r + k * a) % _ed25519._L).to_bytes(32, "little")


class TamperingProxy:
    """A gRPC server that forwards ProposalService and AuditService to a real
    server and passes every proposal it answers through `tamper`: a
    man in the middle that alters approvals on their way to the client."""

    def __init__(self, upstream: Server, tamper: Callable[[types_pb2.Proposal], None]) -> None:
        self._upstream = upstream.channel()
        self._tamper = tamper
        self.proposal_ids: List[str] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        proposal_service_pb2_grpc.add_ProposalServiceServicer_to_server(self._Proposals(self), self._server)
        audit_service_pb2_grpc.add_AuditServiceServicer_to_server(self._Audit(self), self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"
        self._server.start()

    def close(self) -> None:
        self._server.stop(grace=None)
        self._upstream.close()

    def _forward(self, stub: object, method: str, request: object, context: grpc.ServicerContext) -> object:
        try:
            return getattr(stub, method)(request, metadata=context.invocation_metadata(), timeout=context.time_remaining())
        except grpc.RpcError as error:
            context.abort(error.code(), error.details())

    def _altered(self, proposal: types_pb2.Proposal) -> types_pb2.Proposal:
        self.proposal_ids.append(proposal.id)
        self._tamper(proposal)
        return proposal

    class _Proposals(proposal_service_pb2_grpc.ProposalServiceServicer):
        def __init__(self, proxy: "TamperingProxy") -> None:
            self.proxy = proxy
            self.stub = proposal_service_pb2_grpc.ProposalServiceStub(proxy._upstream)

        def Submit(self, request, context):  # noqa: N802 (gRPC's names)
            response = self.proxy._forward(self.stub, "Submit", request, context)
            self.proxy._altered(response.proposal)
            return response

        def GetProposal(self, request, context):  # noqa: N802
            return self.proxy._altered(self.proxy._forward(self.stub, "GetProposal", request, context))

        def CancelProposal(self, request, context):  # noqa: N802
            return self.proxy._altered(self.proxy._forward(self.stub, "CancelProposal", request, context))

        def AwaitDecision(self, request, context):  # noqa: N802
            return self.proxy._altered(self.proxy._forward(self.stub, "AwaitDecision", request, context))

    class _Audit(audit_service_pb2_grpc.AuditServiceServicer):
        def __init__(self, proxy: "TamperingProxy") -> None:
            self.proxy = proxy
            self.stub = audit_service_pb2_grpc.AuditServiceStub(proxy._upstream)

        def GetCheckpoint(self, request, context):  # noqa: N802
            return self.proxy._forward(self.stub, "GetCheckpoint", request, context)
