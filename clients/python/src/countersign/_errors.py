"""The package's exceptions. Every failure is a :class:`CountersignError`;
gRPC status codes map to the subclasses below."""

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from countersign._types import Proposal


class CountersignError(Exception):
    """Base of every error the package raises.

    ``code`` is the gRPC status name when the server (or the transport)
    answered with one, e.g. ``"INVALID_ARGUMENT"``; otherwise ``None``.
    """

    def __init__(self, message: str, *, code: Optional[str] = None, proposal_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        #: The proposal the error concerns, when there is one.
        self.proposal_id = proposal_id


class Rejected(CountersignError):
    """The operation was not approved: rejected, suppressed as a retry of a
    rejection, cancelled, timed out, or an escalation that expired. Nothing
    gated ran."""

    def __init__(
        self,
        message: str,
        *,
        proposal_id: Optional[str],
        agent_message: str,
        suppressed: bool = False,
        state: str = "rejected",
        reason: str = "",
        proposal: "Optional[Proposal]" = None,
        code: Optional[str] = None,
    ) -> None:
        super().__init__(message, code=code, proposal_id=proposal_id)
        #: The server's terse refusal, fit to hand back to an agent.
        self.agent_message = agent_message
        #: True when the server answered from its cache of recent rejections.
        self.suppressed = suppressed
        #: The proposal's state: ``"rejected"``, ``"cancelled"`` or ``"timed_out"``.
        self.state = state
        #: The full reason (empty for agent credentials).
        self.reason = reason
        self.proposal = proposal


class InvalidReceipt(Rejected):
    """An approval whose receipt does not hold: missing, not signed by the
    trusted key, for another proposal, tenant or spec, or expired. Treated
    as a rejection: nothing gated ran."""

    def __init__(self, detail: str, *, proposal_id: Optional[str], proposal: "Optional[Proposal]" = None) -> None:
        super().__init__(
            f"the approval of {proposal_id or 'the proposal'} cannot be trusted: {detail}",
            proposal_id=proposal_id,
            agent_message="the approval could not be verified; ask a human",
            state="approved",
            proposal=proposal,
        )
        self.detail = detail


class Unavailable(CountersignError):
    """No decision could be had: Countersign is unreachable or unavailable
    (``UNAVAILABLE``), or the caller's deadline passed first."""


class DeadlineExceeded(Unavailable):
    """The caller's deadline passed before a decision (``DEADLINE_EXCEEDED``).
    Not a rejection: the proposal (``proposal_id``, when it was accepted)
    stays open, and retrying the same gated call waits for it again."""


class InvalidArgument(CountersignError):
    """``INVALID_ARGUMENT``: the message names the field (a read-class spec
    is one)."""


class Unauthenticated(CountersignError):
    """``UNAUTHENTICATED``: no, unknown, revoked or malformed API key."""


class PermissionDenied(CountersignError):
    """``PERMISSION_DENIED``: the key's role may not do this."""


class NotFound(CountersignError):
    """``NOT_FOUND``: absent, or another tenant's."""


class AlreadyExists(CountersignError):
    """``ALREADY_EXISTS``: the idempotency key was used with another spec."""


class FailedPrecondition(CountersignError):
    """``FAILED_PRECONDITION``: e.g. cancelling a decided proposal, or the
    operator's breaker is open (a human must look)."""


class ResourceExhausted(CountersignError):
    """``RESOURCE_EXHAUSTED``: a rate limit, a stream limit, a request too large."""


class OutOfRange(CountersignError):
    """``OUT_OF_RANGE``: a watch cursor older than the retained history."""
