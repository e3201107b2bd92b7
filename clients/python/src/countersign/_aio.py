"""The asyncio client."""

import asyncio
import contextlib
import functools
import inspect
from typing import Any, AsyncIterator, Iterable, Optional

import grpc
import grpc.aio

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


class AsyncClient(Base):
    """The asyncio twin of :class:`~countersign.Client`: the same arguments
    and operations, as coroutines; ``watch()`` is an async iterator and
    ``countersigned()`` an async context manager. Its channel opens on first
    use, inside the running event loop; close it with ``await close()`` or
    ``async with``."""

    def _setup(self) -> None:
        self._channel: Optional[grpc.aio.Channel] = None

    def _stubs(self) -> Any:
        if self._channel is None:
            target, credentials, options = self._channel_arguments()
            if credentials is None:
                self._channel = grpc.aio.insecure_channel(target, options=options)
            else:
                self._channel = grpc.aio.secure_channel(target, credentials, options=options)
            self._proposals = proposal_service_pb2_grpc.ProposalServiceStub(self._channel)
            self._notifications = notification_service_pb2_grpc.NotificationServiceStub(self._channel)
            self._audit = audit_service_pb2_grpc.AuditServiceStub(self._channel)
        return self

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method: str, service: str, request: Any, deadline: Deadline, proposal_id: Optional[str] = None) -> Any:
        if deadline.passed():
            raise deadline.exceeded(proposal_id)
        stub = getattr(self._stubs(), service)
        try:
            return await getattr(stub, method)(request, timeout=deadline.remaining(), metadata=self._metadata)
        except grpc.RpcError as error:
            raise _wire.error_from_rpc(error, proposal_id) from None

    async def submit(self, spec: Spec, *, timeout: Optional[float] = UNSET) -> SubmitResult:
        """Proposes ``spec`` for review and returns at once."""
        request = proposal_service_pb2.SubmitRequest(spec=_wire.spec_to_wire(spec))
        response = await self._call("Submit", "_proposals", request, self._call_deadline(timeout))
        return _wire.submit_result(response)

    async def get(self, proposal_id: str, *, timeout: Optional[float] = UNSET) -> Proposal:
        request = proposal_service_pb2.GetProposalRequest(id=proposal_id)
        wire = await self._call("GetProposal", "_proposals", request, self._call_deadline(timeout), proposal_id)
        return _wire.proposal_from_wire(wire)

    async def cancel(self, proposal_id: str, reason: str = "", *, timeout: Optional[float] = UNSET) -> Proposal:
        """Cancels an open proposal (``FailedPrecondition`` once it is decided)."""
        request = proposal_service_pb2.CancelProposalRequest(id=proposal_id, reason=reason)
        wire = await self._call("CancelProposal", "_proposals", request, self._call_deadline(timeout), proposal_id)
        return _wire.proposal_from_wire(wire)

    async def _await(self, proposal_id: str, deadline: Deadline) -> Any:
        request = proposal_service_pb2.AwaitDecisionRequest(id=proposal_id)
        stub = self._stubs()._proposals
        while True:
            if deadline.passed():
                raise deadline.exceeded(proposal_id)
            try:
                return await stub.AwaitDecision(request, timeout=deadline.remaining(), metadata=self._metadata)
            except grpc.RpcError as error:
                if not _core.wait_again(error, deadline):
                    raise _wire.error_from_rpc(error, proposal_id) from None

    async def await_decision(self, proposal_id: str, *, timeout: Optional[float] = None) -> Proposal:
        """Waits until the proposal is decided and returns it;
        ``DeadlineExceeded`` when ``timeout`` seconds (None: no limit) pass first."""
        return _wire.proposal_from_wire(await self._await(proposal_id, Deadline(timeout)))

    async def submit_and_wait(self, spec: Spec, *, timeout: Optional[float] = None) -> Proposal:
        """Submits ``spec`` and returns the decided proposal, whatever the decision."""
        deadline = Deadline(timeout)
        request = proposal_service_pb2.SubmitRequest(spec=_wire.spec_to_wire(spec))
        _core.wait_in_submit(request, deadline)
        proposal = (await self._call("Submit", "_proposals", request, deadline)).proposal
        if proposal.state in _core.OPEN_STATES:
            proposal = await self._await(proposal.id, deadline)
        return _wire.proposal_from_wire(proposal)

    def watch(
        self,
        after_cursor: Optional[int] = None,
        *,
        proposal_ids: Iterable[str] = (),
        operator: str = "",
        terminal_only: bool = False,
        max_backoff: float = 5.0,
    ) -> AsyncIterator[Notification]:
        """The tenant's review stream as an async iterator, resuming by
        itself after a disconnect, as :meth:`Client.watch`. Close it with
        ``await stream.aclose()``."""
        request = _core.watch_request(proposal_ids, operator, terminal_only)
        return self._watch(request, after_cursor, max_backoff)

    async def _watch(self, request: Any, cursor: Optional[int], max_backoff: float) -> AsyncIterator[Notification]:
        backoff = _core.Backoff(maximum=max_backoff)
        while True:
            if cursor is not None:
                request.after_cursor = cursor
            call = self._stubs()._notifications.Watch(request, metadata=self._metadata)
            try:
                async for wire in call:
                    backoff.reset()
                    cursor = _core.advance(cursor, wire.cursor)
                    if not wire.heartbeat:
                        yield _wire.notification_from_wire(wire)
            except grpc.RpcError as error:
                cursor = _core.resume_after(error, cursor)
            finally:
                call.cancel()
            await asyncio.sleep(backoff.delay())

    async def trusted_key(self) -> bytes:
        """The Ed25519 public key receipts are checked against: the one given
        to the client, else the one ``GetCheckpoint`` names (asked once)."""
        if self._public_key is None:
            request = audit_service_pb2.GetCheckpointRequest()
            try:
                checkpoint = await self._call("GetCheckpoint", "_audit", request, self._call_deadline(UNSET))
            except CountersignError as error:
                raise type(error)(no_key(error.message), code=error.code) from None
            self._public_key = public_key_bytes(checkpoint.public_key)
        return self._public_key

    async def _authorize(self, spec: Spec, identity: str, timeout: Optional[float]) -> Approval:
        deadline = Deadline(timeout)
        attempt = Attempt(spec, identity, self._window, await self.trusted_key(), self._tenant)
        _core.wait_in_submit(attempt.request, deadline)
        approval = attempt.submitted(await self._call("Submit", "_proposals", attempt.request, deadline))
        while approval is None:
            approval = attempt.settle(await self._await(attempt.open_id(), deadline))
        return approval

    def _wrap(self, function: F, identity: str, template: GateTemplate) -> F:
        if not inspect.iscoroutinefunction(function):
            raise TypeError(
                f"{identity}: an AsyncClient gates `async def` functions; gate plain functions with a Client"
            )

        @functools.wraps(function)
        async def gated(*args: Any, **kwargs: Any) -> Any:
            approval = await self._authorize(template.spec(args, kwargs), identity, template.timeout)
            with _core.running_under(approval):
                return await function(*args, **kwargs)

        return gated  # type: ignore[return-value]

    @contextlib.asynccontextmanager
    async def countersigned(self, spec: Spec, *, timeout: Optional[float] = UNSET) -> AsyncIterator[Approval]:
        """``async with client.countersigned(spec) as approval:`` runs its
        block only on a verified approval of ``spec``."""
        approval = await self._authorize(spec, "countersigned", self._gate_limit(timeout))
        with _core.running_under(approval):
            yield approval
