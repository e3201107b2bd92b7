"""Checking a decision receipt: signed by the trusted key, for exactly this
proposal of this tenant and the digest of this spec, an approval, and not
expired. Any doubt is a failure."""

import time
from typing import Optional, Union

from countersign import _canonical, _ed25519, _wire
from countersign._errors import InvalidReceipt
from countersign._types import Receipt, Spec


def public_key_bytes(public_key: Union[str, bytes]) -> bytes:
    """A 32-byte Ed25519 public key from bytes or 64 hex characters."""
    if isinstance(public_key, str):
        try:
            key = bytes.fromhex(public_key.strip())
        except ValueError:
            raise ValueError("public_key: must be 64 hex characters") from None
    else:
        key = bytes(public_key)
    if len(key) != 32:
        raise ValueError(f"public_key: an Ed25519 public key is 32 bytes (got {len(key)})")
    return key


def spec_digest(spec: Spec) -> str:
    """Hex SHA-256 of the spec's canonical JSON with the idempotency key
    cleared: the server's `ProposalSpec::digest`, which a receipt carries."""
    return _canonical.digest(_wire.spec_to_wire(spec))


def check(
    receipt: Optional[Receipt],
    *,
    public_key: bytes,
    proposal_id: str,
    tenant: str,
    digest: str,
    now_ms: Optional[int] = None,
) -> Receipt:
    """The receipt when it holds; :class:`InvalidReceipt` naming the first
    check it fails otherwise."""

    def refuse(detail: str) -> InvalidReceipt:
        return InvalidReceipt(detail, proposal_id=proposal_id)

    if receipt is None:
        raise refuse("the approval carries no receipt")
    if not _ed25519.verify(public_key, receipt.signed_bytes(), receipt.signature):
        raise refuse("its signature does not verify under the trusted key")
    if receipt.proposal_id != proposal_id:
        raise refuse(f"the receipt is for proposal {receipt.proposal_id!r}")
    if receipt.tenant != tenant:
        raise refuse(f"the receipt is for tenant {receipt.tenant!r}, not {tenant!r}")
    if receipt.outcome != "approve":
        raise refuse(f"the receipt records {receipt.outcome or 'no outcome'!r}, not an approval")
    if receipt.spec_digest != digest:
        raise refuse("the receipt's spec digest is not the digest of the spec that was submitted")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if now >= receipt.expires_at_ms:
        raise refuse(f"the receipt expired at {receipt.expires_at.isoformat()}")
    return receipt


def verify_receipt(
    receipt: Optional[Receipt],
    *,
    public_key: Union[str, bytes],
    proposal_id: str,
    tenant: str,
    spec: Optional[Spec] = None,
    spec_digest_hex: Optional[str] = None,
    now_ms: Optional[int] = None,
) -> Receipt:
    """Checks a receipt the way a gate does before it runs anything: the
    Ed25519 signature under ``public_key`` (``countersign admin signing-key
    show``), the proposal id, the tenant, an approval, the digest of ``spec``
    (or ``spec_digest_hex``), and that it has not expired (at ``now_ms``,
    default now). Returns the receipt, or raises :class:`InvalidReceipt`."""
    if (spec is None) == (spec_digest_hex is None):
        raise ValueError("give exactly one of spec and spec_digest_hex")
    digest = spec_digest(spec) if spec is not None else str(spec_digest_hex)
    return check(
        receipt,
        public_key=public_key_bytes(public_key),
        proposal_id=proposal_id,
        tenant=tenant,
        digest=digest,
        now_ms=now_ms,
    )
