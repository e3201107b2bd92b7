"""The blocking client."""

import asyncio
import contextlib
import functools
import inspect
import time
from typing import Any, Iterable, Iterator, Optional

import grpc

from countersign import _core, _wire
from countersign._base import UNSET, Base, F, no_key
from countersign._core import Attempt, Deadline, GateTemplate
from countersign._errors import CountersignError
from countersign._receipt import public_key_bytes
from countersign._types import Approval, Notification, Proposal, Spec, SubmitResult
from countersign.v1 import (
    audit_service_pb2,
    audit_service_pb2_grpc,
    notification_service_pb2_grpc,
    proposal_service_pb2,
    proposal_service_pb2_grpc,
)


class Client(Base):
    """A blocking client of one Countersign endpoint, safe to share between
    threads.

    ``endpoint`` is a URL as ``COUNTERSIGN_ENDPOINT`` is written
    (``http://host:port``; ``https://`` means TLS, checked against the
    system's roots or ``root_certificates``). ``public_key`` (hex, from
    ``countersign admin signing-key show``) is the key receipts must be
    signed with; without it the client asks ``AuditService.GetCheckpoint``
    once, which needs an auditor or admin key. ``tenant``, when given, is
    the only tenant whose receipts are accepted; otherwise it is the tenant
    the server names for the submitted proposal. ``timeout`` bounds each
    plain call, ``gate_timeout`` each gated call's wait for its decision
    (seconds; None: no limit).
    """

    def _setup(self) -> None:
        target, credentials, options = self._channel_arguments()
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._proposals = proposal_service_pb2_grpc.ProposalServiceStub(self._channel)
        self._notifications = notification_service_pb2_grpc.NotificationServiceStub(self._channel)
        self._audit = audit_service_pb2_grpc.AuditServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Any, request: Any, deadline: Deadline, proposal_id: Optional[str] = None) -> Any:
        if deadline.passed():
            raise deadline.exceeded(proposal_id)
        try:
            return method(request, timeout=deadline.remaining(), metadata=self._metadata)
        except grpc.RpcError as error:
            raise _wire.error_from_rpc(error, proposal_id) from None

    def submit(self, spec: Spec, *, timeout: Optional[float] = UNSET) -> SubmitResult:
        """Proposes ``spec`` for review and returns at once (the proposal is
        usually still pending)."""
        request = proposal_service_pb2.SubmitRequest(spec=_wire.spec_to_wire(spec))
        return _wire.submit_result(self._call(self._proposals.Submit, request, self._call_deadline(timeout)))

    def get(self, proposal_id: str, *, timeout: Optional[float] = UNSET) -> Proposal:
        request = proposal_service_pb2.GetProposalRequest(id=proposal_id)
        wire = self._call(self._proposals.GetProposal, request, self._call_deadline(timeout), proposal_id)
        return _wire.proposal_from_wire(wire)

    def cancel(self, proposal_id: str, reason: str = "", *, timeout: Optional[float] = UNSET) -> Proposal:
        """Cancels an open proposal (``FailedPrecondition`` once it is decided)."""
        request = proposal_service_pb2.CancelProposalRequest(id=proposal_id, reason=reason)
        wire = self._call(self._proposals.CancelProposal, request, self._call_deadline(timeout), proposal_id)
        return _wire.proposal_from_wire(wire)

    def _await(self, proposal_id: str, deadline: Deadline) -> Any:
        request = proposal_service_pb2.AwaitDecisionRequest(id=proposal_id)
        while True:
            if deadline.passed():
                raise deadline.exceeded(proposal_id)
            try:
                return self._proposals.AwaitDecision(request, timeout=deadline.remaining(), metadata=self._metadata)
            except grpc.RpcError as error:
                if not _core.wait_again(error, deadline):
                    raise _wire.error_from_rpc(error, proposal_id) from None

    def await_decision(self, proposal_id: str, *, timeout: Optional[float] = None) -> Proposal:
        """Blocks until the proposal is decided and returns it (escalated
        proposals are waited for like any other); ``DeadlineExceeded`` when
        ``timeout`` seconds (None: no limit) pass first."""
        return _wire.proposal_from_wire(self._await(proposal_id, Deadline(timeout)))

    def submit_and_wait(self, spec: Spec, *, timeout: Optional[float] = None) -> Proposal:
        """Submits ``spec`` and returns the decided proposal, whatever the
        decision (a suppressed retry comes back at once, rejected), in one
        call (``wait_for_decision``) unless the wait outlasts it. To act
        only on a verified approval, use :meth:`gate` or :meth:`countersigned`."""
        deadline = Deadline(timeout)
        request = proposal_service_pb2.SubmitRequest(spec=_wire.spec_to_wire(spec))
        _core.wait_in_submit(request, deadline)
        proposal = self._call(self._proposals.Submit, request, deadline).proposal
        if proposal.state in _core.OPEN_STATES:
            proposal = self._await(proposal.id, deadline)
        return _wire.proposal_from_wire(proposal)

    def watch(
        self,
        after_cursor: Optional[int] = None,
        *,
        proposal_ids: Iterable[str] = (),
        operator: str = "",
        terminal_only: bool = False,
        max_backoff: float = 5.0,
    ) -> Iterator[Notification]:
        """The tenant's review stream, one :class:`Notification` per event.

        ``after_cursor``: None for live from now, 0 for all retained history,
        N for every event after N. When the connection drops or the server
        restarts, it reconnects by itself (backing off up to ``max_backoff``
        seconds) and resumes after the last cursor it saw: no event twice,
        none missed. It ends only when closed (``close()``) or on an error
        that retrying cannot cure (``Unauthenticated``, ``PermissionDenied``,
        ``InvalidArgument``, ``OutOfRange``). A stream that started live and
        dropped before its first event or heartbeat resumes live."""
        request = _core.watch_request(proposal_ids, operator, terminal_only)
        return self._watch(request, after_cursor, max_backoff)

    def _watch(self, request: Any, cursor: Optional[int], max_backoff: float) -> Iterator[Notification]:
        backoff = _core.Backoff(maximum=max_backoff)
        while True:
            if cursor is not None:
                request.after_cursor = cursor
            call = self._notifications.Watch(request, metadata=self._metadata)
            try:
                for wire in call:
                    backoff.reset()
                    cursor = _core.advance(cursor, wire.cursor)
                    if not wire.heartbeat:
                        yield _wire.notification_from_wire(wire)
            except grpc.RpcError as error:
                cursor = _core.resume_after(error, cursor)
            finally:
                call.cancel()
            time.sleep(backoff.delay())

    def trusted_key(self) -> bytes:
        """The Ed25519 public key receipts are checked against: the one given
        to the client, else the one ``GetCheckpoint`` names (asked once)."""
        if self._public_key is None:
            request = audit_service_pb2.GetCheckpointRequest()
            try:
                checkpoint = self._call(self._audit.GetCheckpoint, request, self._call_deadline(UNSET))
            except CountersignError as error:
                raise type(error)(no_key(error.message), code=error.code) from None
            self._public_key = public_key_bytes(checkpoint.public_key)
        return self._public_key

    def _authorize(self, spec: Spec, identity: str, timeout: Optional[float]) -> Approval:
        deadline = Deadline(timeout)
        attempt = Attempt(spec, identity, self._window, self.trusted_key(), self._tenant)
        _core.wait_in_submit(attempt.request, deadline)
        approval = attempt.submitted(self._call(self._proposals.Submit, attempt.request, deadline))
        while approval is None:
            approval = attempt.settle(self._await(attempt.open_id(), deadline))
        return approval

    def _wrap(self, function: F, identity: str, template: GateTemplate) -> F:
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def gated_coroutine(*args: Any, **kwargs: Any) -> Any:
                spec = template.spec(args, kwargs)
                approval = await asyncio.to_thread(self._authorize, spec, identity, template.timeout)
                with _core.running_under(approval):
                    return await function(*args, **kwargs)

            return gated_coroutine  # type: ignore[return-value]

        @functools.wraps(function)
        def gated(*args: Any, **kwargs: Any) -> Any:
            approval = self._authorize(template.spec(args, kwargs), identity, template.timeout)
            with _core.running_under(approval):
                return function(*args, **kwargs)

        return gated  # type: ignore[return-value]

    @contextlib.contextmanager
    def countersigned(self, spec: Spec, *, timeout: Optional[float] = UNSET) -> Iterator[Approval]:
        """``with client.countersigned(spec) as approval:`` runs its block
        only on a verified approval of ``spec``, as :meth:`gate` runs a
        function: the same wait, and the same exceptions, raised before the
        block starts."""
        approval = self._authorize(spec, "countersigned", self._gate_limit(timeout))
        with _core.running_under(approval):
            yield approval
