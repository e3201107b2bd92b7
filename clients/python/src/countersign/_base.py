"""What :class:`~countersign.Client` and :class:`~countersign.AsyncClient`
share: their configuration and the ``gate`` decorator's arguments."""

import os
from typing import Any, Callable, Optional, Tuple, TypeVar, Union

from countersign import _core
from countersign._core import GateTemplate
from countersign._receipt import public_key_bytes

F = TypeVar("F", bound=Callable[..., Any])

#: "Not given": the client's configured default applies.
UNSET: Any = object()


class Base:
    def __init__(
        self,
        endpoint: str,
        api_key: str,
        *,
        public_key: Optional[Union[str, bytes]] = None,
        tenant: Optional[str] = None,
        timeout: Optional[float] = _core.DEFAULT_CALL_TIMEOUT,
        gate_timeout: Optional[float] = _core.DEFAULT_GATE_TIMEOUT,
        idempotency_window: float = _core.DEFAULT_IDEMPOTENCY_WINDOW,
        root_certificates: Optional[bytes] = None,
    ) -> None:
        self._endpoint = _core.parse_endpoint(endpoint)
        self._metadata = _core.metadata(api_key)
        self._public_key = None if public_key is None else public_key_bytes(public_key)
        self._tenant = tenant
        self._timeout = timeout
        self._gate_timeout = gate_timeout
        if idempotency_window <= 0:
            raise ValueError("idempotency_window: must be positive")
        self._window = idempotency_window
        self._root_certificates = root_certificates
        self._setup()

    def _setup(self) -> None:
        """Prepares the client's channel (the blocking client opens it now,
        the asyncio one on first use, inside its event loop)."""
        raise NotImplementedError

    @classmethod
    def from_env(cls: Any, **kwargs: Any) -> Any:
        """A client of ``COUNTERSIGN_ENDPOINT`` (default
        ``http://127.0.0.1:50051``) with ``COUNTERSIGN_API_KEY`` (or the file
        named by ``COUNTERSIGN_API_KEY_FILE``) and, when set,
        ``COUNTERSIGN_PUBLIC_KEY``; ``kwargs`` as the constructor's."""
        if "public_key" not in kwargs and os.environ.get("COUNTERSIGN_PUBLIC_KEY"):
            kwargs["public_key"] = os.environ["COUNTERSIGN_PUBLIC_KEY"]
        endpoint = os.environ.get("COUNTERSIGN_ENDPOINT", "http://127.0.0.1:50051")
        return cls(endpoint, _core.api_key_from_env(), **kwargs)

    def _channel_arguments(self) -> Tuple[str, Any, Tuple[Tuple[str, Any], ...]]:
        """The target, the TLS credentials (None for plaintext) and the options."""
        credentials = None
        if self._endpoint.tls:
            import grpc

            credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
        return self._endpoint.target, credentials, _core.channel_options()

    def _call_deadline(self, timeout: Any) -> _core.Deadline:
        return _core.Deadline(self._timeout if timeout is UNSET else timeout)

    def _gate_limit(self, timeout: Any) -> Optional[float]:
        return self._gate_timeout if timeout is UNSET else timeout

    def _wrap(self, function: F, identity: str, template: GateTemplate) -> F:
        raise NotImplementedError

    def gate(
        self,
        *,
        action: Any,
        target: Any,
        blast_radius: Any,
        reason: Any,
        cls: Any = "write",
        parameters: Any = None,
        operator: Any = "",
        context_summary: Any = "",
        incident_id: Any = "",
        labels: Any = None,
        rollback_plan: Any = "",
        force_approve_no_sop: Any = False,
        idempotency_key: Any = None,
        timeout: Optional[float] = UNSET,
    ) -> Callable[[F], F]:
        """Decorates a function so that each call is proposed and the
        function runs only on a verified approval of that proposal.

        Every argument is a value or a callable of the wrapped function's
        arguments (``target=lambda host, service: host``). ``cls`` is
        ``"write"`` or ``"destructive"``; a ``"read"`` gate is refused here,
        when the function is decorated. A call waits up to ``timeout``
        seconds (default: the client's ``gate_timeout``) for the decision,
        escalations to people included.

        Unless ``idempotency_key`` is given, each call derives one from the
        function and its spec: a retried identical call (within the client's
        ``idempotency_window``) finds its earlier proposal instead of making
        a second one, and gets its decision.

        The function runs only when the answer is APPROVED, for exactly the
        proposal submitted, with a receipt signed by the trusted key for
        this tenant and the digest of this spec, not expired; inside it,
        :func:`countersign.current_approval` returns that approval.
        Otherwise the call raises :class:`~countersign.Rejected` (with
        ``agent_message``, ``proposal_id``, ``suppressed``; an
        :class:`~countersign.InvalidReceipt` for a receipt that does not
        hold) or :class:`~countersign.Unavailable` (unreachable, or
        :class:`~countersign.DeadlineExceeded`), or another
        :class:`~countersign.CountersignError` for a refused request.
        """
        template = GateTemplate(
            action=action,
            target=target,
            blast_radius=blast_radius,
            reason=reason,
            cls=cls,
            parameters=parameters,
            operator=operator,
            context_summary=context_summary,
            incident_id=incident_id,
            labels=labels,
            rollback_plan=rollback_plan,
            force_approve_no_sop=force_approve_no_sop,
            idempotency_key=idempotency_key,
            timeout=self._gate_limit(timeout),
        )

        def decorate(function: F) -> F:
            return self._wrap(function, f"{function.__module__}.{function.__qualname__}", template)

        return decorate


def no_key(message: str) -> str:
    return (
        "no key to verify receipts with: give the client public_key= (the output of "
        f"`countersign admin signing-key show`); asking GetCheckpoint for it failed: {message}"
    )
