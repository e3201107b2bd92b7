"""What the blocking and the asyncio clients share: endpoints, deadlines,
backoff, the gate's specs and idempotency keys, and the judgement of an
answer (the one place that decides whether anything may run)."""

import contextlib
import contextvars
import hashlib
import os
import random
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, Union

import grpc

from countersign import _canonical, _receipt, _wire
from countersign._errors import DeadlineExceeded, InvalidReceipt, Rejected
from countersign._types import Approval, Spec
from countersign.v1 import notification_service_pb2, proposal_service_pb2, types_pb2

#: How long a gated call waits for a decision by default (seconds).
DEFAULT_GATE_TIMEOUT = 300.0
#: How long an ordinary call may take by default (seconds).
DEFAULT_CALL_TIMEOUT = 30.0
#: How long one Submit waits for its decision when the caller sets no limit
#: (the server caps a wait at its long-poll ceiling, 15 minutes by default);
#: a proposal still open then is awaited again.
SUBMIT_WAIT_CHUNK = 300.0
#: A waiting Submit's wait ends this long before the caller's deadline, so
#: the answer (the decision, or the proposal still open) arrives within it.
ANSWER_SLACK = 1.0
#: Derived idempotency keys are the same for identical calls within one
#: window of this many seconds of the clock (see :func:`derive_key`).
DEFAULT_IDEMPOTENCY_WINDOW = 900.0

OPEN_STATES = (
    types_pb2.PROPOSAL_STATE_PENDING,
    types_pb2.PROPOSAL_STATE_REVIEWING,
    types_pb2.PROPOSAL_STATE_ESCALATED,
)

# A watch ended with one of these resumes from its last cursor; any other
# code (bad credentials, a bad request, a cursor past retention) is final.
RESUMABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
    }
)
_RESUME_FROM = re.compile(r"resume from cursor (\d+)")


@dataclass(frozen=True)
class Endpoint:
    """Where a client connects: `host:port` for gRPC, and whether over TLS."""

    target: str
    tls: bool


def parse_endpoint(url: str) -> Endpoint:
    """`http://host:port` (plaintext) or `https://host[:port]` (TLS), as
    `COUNTERSIGN_ENDPOINT` is written."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"endpoint: must be an http:// or https:// URL (got {url!r})")
    if not parts.hostname or parts.username or parts.password:
        raise ValueError(f"endpoint: must name a host and nothing else (got {url!r})")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"endpoint: takes no path, query or fragment (got {url!r})")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"endpoint: bad port (got {url!r})") from None
    tls = parts.scheme == "https"
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return Endpoint(target=f"{host}:{port or (443 if tls else 80)}", tls=tls)


def api_key_from_env() -> str:
    """`COUNTERSIGN_API_KEY`, else the file named by `COUNTERSIGN_API_KEY_FILE`."""
    key = os.environ.get("COUNTERSIGN_API_KEY")
    if key:
        return key.strip()
    path = os.environ.get("COUNTERSIGN_API_KEY_FILE")
    if path:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    raise ValueError("no API key: set COUNTERSIGN_API_KEY or COUNTERSIGN_API_KEY_FILE")


def metadata(api_key: str) -> Tuple[Tuple[str, str], ...]:
    key = api_key.strip()
    if not key or any(c in key for c in "\r\n"):
        raise ValueError("api_key: must be one non-empty line")
    return (("authorization", f"Bearer {key}"),)


def channel_options() -> Tuple[Tuple[str, Any], ...]:
    from countersign import __version__

    return (
        ("grpc.primary_user_agent", f"countersign-python/{__version__}"),
        # A restarted server is found again within a second or two.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    )


class Deadline:
    """A point in time (monotonic) by which a call must be answered; none
    means no limit."""

    def __init__(self, timeout: Optional[float]) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> Optional[float]:
        return None if self._at is None else self._at - time.monotonic()

    def passed(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0

    def cut_short(self) -> bool:
        """After DEADLINE_EXCEEDED: whether the server ended the wait (its
        own ceiling) well before this deadline, so it is worth waiting again."""
        remaining = self.remaining()
        return remaining is None or remaining > 1.0

    def exceeded(self, proposal_id: Optional[str]) -> DeadlineExceeded:
        what = f"proposal {proposal_id}" if proposal_id else "an answer"
        return DeadlineExceeded(
            f"DEADLINE_EXCEEDED: no decision on {what} before the deadline",
            code="DEADLINE_EXCEEDED",
            proposal_id=proposal_id,
        )


def wait_in_submit(request: proposal_service_pb2.SubmitRequest, deadline: "Deadline") -> None:
    """Asks ``request`` to wait for its decision (``wait_for_decision``) for
    as long as ``deadline`` allows, less the time to answer: submitting and
    waiting is then one call. With too little time left it does not wait."""
    remaining = deadline.remaining()
    wait = SUBMIT_WAIT_CHUNK if remaining is None else remaining - ANSWER_SLACK
    if wait > 0:
        request.wait_for_decision.FromNanoseconds(int(wait * 1e9))


class Backoff:
    """Exponential backoff with jitter between reconnections."""

    def __init__(self, initial: float = 0.1, maximum: float = 5.0) -> None:
        self._initial = min(initial, maximum)
        self._maximum = maximum
        self._next = self._initial

    def reset(self) -> None:
        self._next = self._initial

    def delay(self) -> float:
        delay = random.uniform(self._next / 2, self._next)
        self._next = min(self._next * 2, self._maximum)
        return delay


def advance(cursor: Optional[int], received: int) -> int:
    """A watch's position after a notification (heartbeats carry it too)."""
    return received if cursor is None else max(cursor, received)


def resume_after(error: grpc.RpcError, cursor: Optional[int]) -> Optional[int]:
    """Where a watch that ended with `error` resumes: after its last cursor,
    or after the later position the server named ("resume from cursor N":
    everything up to N was sent or did not match the stream's filter).
    Raises the package's exception when retrying cannot help."""
    if _wire.status_code(error) not in RESUMABLE:
        raise _wire.error_from_rpc(error) from None
    match = _RESUME_FROM.search(_wire.status_details(error))
    if match is None:
        return cursor
    return advance(cursor, int(match.group(1)))


def wait_again(error: grpc.RpcError, deadline: Deadline) -> bool:
    """After a failed AwaitDecision: whether to wait again, because the
    server ended the wait at its own ceiling, well before the caller's
    deadline. Any other failure ends the wait."""
    return _wire.status_code(error) == grpc.StatusCode.DEADLINE_EXCEEDED and deadline.cut_short()


def watch_request(proposal_ids: Any, operator: str, terminal_only: bool) -> Any:
    if isinstance(proposal_ids, str):
        raise TypeError("proposal_ids: a collection of ids, not one string")
    return notification_service_pb2.WatchRequest(
        proposal_ids=list(proposal_ids), operator=operator, terminal_only=terminal_only
    )


def derive_key(identity: str, spec: types_pb2.ProposalSpec, window: float, now: float) -> str:
    """An idempotency key for a gated call: the same for the same callable
    and the same spec within one window of the clock, so a retried call
    finds its proposal again instead of proposing twice; a new one in the
    next window, so an identical call later is reviewed afresh."""
    without_key = types_pb2.ProposalSpec()
    without_key.CopyFrom(spec)
    without_key.idempotency_key = ""
    seed = f"countersign-gate/v1\n{identity}\n{int(now // window)}\n{_canonical.canonical_json(without_key)}"
    return "py-" + hashlib.sha256(seed.encode("utf-8")).hexdigest()


class Attempt:
    """One gated attempt: the spec as submitted (with its idempotency key),
    its digest, and the judgement of each answer about it."""

    def __init__(self, spec: Spec, identity: str, window: float, public_key: bytes, tenant: Optional[str]) -> None:
        if spec.cls == "read":
            raise ValueError("cls: read operations are never reviewed, so never gated")
        wire = _wire.spec_to_wire(spec)
        if not wire.idempotency_key:
            wire.idempotency_key = derive_key(identity, wire, window, time.time())
        self.request = proposal_service_pb2.SubmitRequest(spec=wire)
        self.digest = _canonical.digest(wire)
        self.proposal_id: Optional[str] = None
        self._public_key = public_key
        self._tenant = tenant

    def open_id(self) -> str:
        """The id of the proposal being waited for."""
        assert self.proposal_id is not None, "settle only after submitted"
        return self.proposal_id

    def submitted(self, response: proposal_service_pb2.SubmitResponse) -> Optional[Approval]:
        """Judges the answer to Submit: an approval, None while the proposal
        is open, or the exception to raise."""
        proposal = response.proposal
        self.proposal_id = proposal.id
        if self._tenant is None:
            self._tenant = proposal.tenant
        if response.suppressed:
            raise rejection(proposal, suppressed=True)
        return self.settle(proposal)

    def settle(self, proposal: types_pb2.Proposal) -> Optional[Approval]:
        """Judges a proposal as read back: an approval only when it is this
        proposal, APPROVED, with an approving decision whose receipt holds."""
        if not proposal.id or proposal.id != self.proposal_id:
            raise InvalidReceipt(f"the answer is about proposal {proposal.id!r}", proposal_id=self.proposal_id)
        if proposal.state in OPEN_STATES:
            return None
        if proposal.state != types_pb2.PROPOSAL_STATE_APPROVED:
            raise rejection(proposal, suppressed=False)
        if proposal.decision.outcome != types_pb2.DECISION_OUTCOME_APPROVE:
            raise InvalidReceipt("the proposal is APPROVED without an approving decision", proposal_id=proposal.id)
        if proposal.tenant != self._tenant:
            raise InvalidReceipt(f"the answer is for tenant {proposal.tenant!r}", proposal_id=self.proposal_id)
        read = _wire.proposal_from_wire(proposal)
        assert read.decision is not None
        receipt = _receipt.check(
            read.decision.receipt,
            public_key=self._public_key,
            proposal_id=proposal.id,
            tenant=str(self._tenant),
            digest=self.digest,
        )
        return Approval(proposal=read, receipt=receipt)


def rejection(proposal: types_pb2.Proposal, *, suppressed: bool) -> Rejected:
    read = _wire.proposal_from_wire(proposal)
    decision = read.decision
    agent_message = decision.agent_message if decision else ""
    reason = decision.reason if decision else ""
    state = read.state or "unknown"
    if state == "cancelled":
        reason = reason or read.cancel_reason
        agent_message = agent_message or "the proposal was cancelled"
    agent_message = agent_message or f"the proposal was not approved ({state})"
    said = reason or agent_message
    note = " (suppressed: an identical proposal was just rejected)" if suppressed else ""
    return Rejected(
        f"proposal {read.id} {state}{note}: {said}",
        proposal_id=read.id,
        agent_message=agent_message,
        suppressed=suppressed,
        state=state,
        reason=reason,
        proposal=read,
    )


#: The approval a gated function (or a `countersigned` block) runs under.
_CURRENT: "contextvars.ContextVar[Optional[Approval]]" = contextvars.ContextVar(
    "countersign_current_approval", default=None
)


def current_approval() -> Optional[Approval]:
    """The verified approval the running gated function or `countersigned`
    block runs under (its proposal and receipt); None outside one."""
    return _CURRENT.get()


@contextlib.contextmanager
def running_under(approval: Approval) -> Iterator[Approval]:
    token = _CURRENT.set(approval)
    try:
        yield approval
    finally:
        _CURRENT.reset(token)


_Value = Union[Any, Callable[..., Any]]


class GateTemplate:
    """The arguments of `@client.gate(...)`: fixed values, or callables of
    the wrapped function's arguments, checked as far as they can be when
    the function is decorated."""

    def __init__(
        self,
        *,
        action: _Value,
        target: _Value,
        blast_radius: _Value,
        reason: _Value,
        cls: _Value,
        parameters: _Value,
        operator: _Value,
        context_summary: _Value,
        incident_id: _Value,
        labels: _Value,
        rollback_plan: _Value,
        force_approve_no_sop: _Value,
        idempotency_key: _Value,
        timeout: Optional[float],
    ) -> None:
        if not callable(cls):
            if cls == "read":
                raise ValueError("cls: read operations are never reviewed, so never gated")
            _wire.check_class(cls)
        if not callable(blast_radius):
            _wire.check_blast_radius(blast_radius)
        self._fields: Dict[str, _Value] = {
            "action": action,
            "target": target,
            "blast_radius": blast_radius,
            "reason": reason,
            "cls": cls,
            "parameters": {} if parameters is None else parameters,
            "operator": operator,
            "context_summary": context_summary,
            "incident_id": incident_id,
            "labels": {} if labels is None else labels,
            "rollback_plan": rollback_plan,
            "force_approve_no_sop": force_approve_no_sop,
            "idempotency_key": "" if idempotency_key is None else idempotency_key,
        }
        self.timeout = timeout

    def spec(self, args: Tuple[Any, ...], kwargs: Mapping[str, Any]) -> Spec:
        """The spec of one call: every callable applied to its arguments."""
        values = {name: value(*args, **kwargs) if callable(value) else value for name, value in self._fields.items()}
        return Spec(**values)
