"""Receipt checks, one by one, on receipts signed here (the end-to-end tests
do the same through a gated call against the real server)."""

import dataclasses

import pytest

import countersign
from support import public_key, sign

SEED = bytes(range(32))
KEY = public_key(SEED)
SPEC = countersign.Spec(action="py_restart_service", target="node-1", blast_radius="single_device", reason="down")
NOW = 1_800_000_000_000


def receipt(**changes) -> countersign.Receipt:
    fields = dict(
        tenant="default",
        proposal_id="01PROPOSAL",
        spec_digest=countersign.spec_digest(SPEC),
        outcome="approve",
        decided_at_ms=NOW - 1_000,
        expires_at_ms=NOW + 60_000,
        signature=b"",
    )
    fields.update(changes)
    unsigned = countersign.Receipt(**fields)
    return dataclasses.replace(unsigned, signature=sign(SEED, unsigned.signed_bytes()))


def check(r, **overrides):
    arguments = dict(public_key=KEY, proposal_id="01PROPOSAL", tenant="default", spec=SPEC, now_ms=NOW)
    arguments.update(overrides)
    return countersign.verify_receipt(r, **arguments)


def test_the_signed_bytes_are_the_documented_ones():
    r = receipt()
    assert r.signed_bytes() == (
        f"countersign-receipt/v1\ndefault\n01PROPOSAL\n{r.spec_digest}\napprove\n{NOW - 1000}\n{NOW + 60000}\n"
    ).encode()


def test_a_sound_receipt_verifies():
    r = receipt()
    assert check(r) is r
    assert check(r, spec=None, spec_digest_hex=countersign.spec_digest(SPEC)) is r
    assert check(r, public_key=KEY.hex()) is r


@pytest.mark.parametrize(
    "altered, detail",
    [
        (lambda r: dataclasses.replace(r, signature=bytes([r.signature[0] ^ 1]) + r.signature[1:]), "signature"),
        (lambda r: dataclasses.replace(r, signature=b""), "signature"),
        (lambda r: dataclasses.replace(r, tenant="acme"), "signature"),
        (lambda r: dataclasses.replace(r, expires_at_ms=r.expires_at_ms + 1), "signature"),
        (lambda r: dataclasses.replace(r, spec_digest="0" * 64), "signature"),
    ],
    ids=["flipped-byte", "no-signature", "tenant-edited", "expiry-edited", "digest-edited"],
)
def test_an_altered_receipt_fails_its_signature(altered, detail):
    with pytest.raises(countersign.InvalidReceipt) as refused:
        check(altered(receipt()))
    assert detail in refused.value.detail
    assert refused.value.proposal_id == "01PROPOSAL"


def test_a_receipt_signed_by_another_key_fails():
    with pytest.raises(countersign.InvalidReceipt, match="signature"):
        check(receipt(), public_key=public_key(bytes(32)))


@pytest.mark.parametrize(
    "changes, detail",
    [
        ({"proposal_id": "01OTHER"}, "for proposal '01OTHER'"),
        ({"tenant": "acme"}, "for tenant 'acme'"),
        ({"outcome": "reject"}, "not an approval"),
        ({"spec_digest": countersign.spec_digest(dataclasses.replace(SPEC, target="node-2"))}, "spec digest"),
        ({"expires_at_ms": NOW}, "expired"),
        ({"expires_at_ms": NOW - 1}, "expired"),
    ],
    ids=["another-proposal", "another-tenant", "a-rejection", "another-spec", "expires-now", "expired"],
)
def test_a_validly_signed_receipt_for_anything_else_fails(changes, detail):
    # Signed with the trusted key: only the check named can refuse it.
    with pytest.raises(countersign.InvalidReceipt) as refused:
        check(receipt(**changes))
    assert detail in refused.value.detail


def test_no_receipt_fails():
    with pytest.raises(countersign.InvalidReceipt, match="no receipt"):
        check(None)


def test_an_invalid_receipt_is_a_rejection():
    with pytest.raises(countersign.Rejected) as refused:
        check(receipt(tenant="acme"))
    assert refused.value.agent_message
    assert not refused.value.suppressed


def test_a_malformed_public_key_is_refused():
    with pytest.raises(ValueError, match="public_key"):
        check(receipt(), public_key="abc")
    with pytest.raises(ValueError, match="32 bytes"):
        check(receipt(), public_key=b"\x00" * 31)
