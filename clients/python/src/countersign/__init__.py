"""Countersign's Python client: propose an operation, wait for the second
signature, and run the operation only on a verified approval.

    import countersign

    client = countersign.Client("http://127.0.0.1:50051", api_key, public_key=KEY)

    @client.gate(action="host_restart_service", target=lambda host: host,
                 blast_radius="single_device", reason="nginx is down")
    def restart(host): ...

See :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).
"""

from countersign._aio import AsyncClient
from countersign._client import Client
from countersign._core import current_approval
from countersign._errors import (
    AlreadyExists,
    CountersignError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvalidReceipt,
    NotFound,
    OutOfRange,
    PermissionDenied,
    Rejected,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from countersign._receipt import spec_digest, verify_receipt
from countersign._types import (
    Approval,
    Decision,
    GateResult,
    Notification,
    Proposal,
    Receipt,
    Spec,
    SubmitResult,
    Vote,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "Approval",
    "AsyncClient",
    "Client",
    "CountersignError",
    "DeadlineExceeded",
    "Decision",
    "FailedPrecondition",
    "GateResult",
    "InvalidArgument",
    "InvalidReceipt",
    "NotFound",
    "Notification",
    "OutOfRange",
    "PermissionDenied",
    "Proposal",
    "Receipt",
    "Rejected",
    "ResourceExhausted",
    "Spec",
    "SubmitResult",
    "Unauthenticated",
    "Unavailable",
    "Vote",
    "current_approval",
    "spec_digest",
    "verify_receipt",
]
