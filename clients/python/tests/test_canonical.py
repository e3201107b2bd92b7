"""The spec digest, reproduced byte for byte: the float forms serde_json
writes, the field order and escaping of the server's canonical JSON. The
end-to-end proof, against digests the server computed, is in
test_gate.py (test_the_digest_is_the_servers)."""

import hashlib

import pytest

import countersign
from countersign import _canonical, _wire


@pytest.mark.parametrize(
    "value, text",
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (-1.0, "-1.0"),
        (2.5, "2.5"),
        (0.1, "0.1"),
        (123.456, "123.456"),
        (1e15, "1000000000000000.0"),
        (9007199254740993.0, "9007199254740992.0"),
        (1234567890123456.7, "1234567890123456.8"),
        (1e16, "1e+16"),
        (1.5e16, "1.5e+16"),
        (1e21, "1e+21"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (1e-5, "0.00001"),
        (1.25e-5, "0.0000125"),
        (1e-6, "1e-6"),
        (1e-7, "1e-7"),
        (-2.5e-300, "-2.5e-300"),
        (5e-324, "5e-324"),
    ],
)
def test_numbers_are_written_as_serde_json_writes_doubles(value, text):
    assert _canonical.number(value) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_have_no_canonical_form(value):
    with pytest.raises(ValueError):
        _canonical.number(value)


SPEC = countersign.Spec(
    action="host_restart_service",
    target="node-01",
    blast_radius="single_device",
    reason='502s; "nginx" OOM\n',
    parameters={"service": "nginx", "b": 1, "a": [1, 2.5, None, True, {"z": "ü", "y": {}}]},
    operator="user_42",
    incident_id="INC-1",
    labels={"zeta": "1", "alpha": "\x01"},
    rollback_plan="systemctl start nginx",
    idempotency_key="k1",
)

CANONICAL = (
    '{"action":"host_restart_service","class":"write","target":"node-01",'
    '"parameters":{"a":[1.0,2.5,null,true,{"y":{},"z":"ü"}],"b":1.0,"service":"nginx"},'
    '"reason":"502s; \\"nginx\\" OOM\\n","blast_radius":"single_device","operator":"user_42",'
    '"context_summary":"","incident_id":"INC-1","labels":{"alpha":"\\u0001","zeta":"1"},'
    '"rollback_plan":"systemctl start nginx","force_approve_no_sop":false,"idempotency_key":"k1"}'
)


def test_the_canonical_json_has_the_servers_field_order_sorted_maps_and_escapes():
    assert _canonical.canonical_json(_wire.spec_to_wire(SPEC)) == CANONICAL


def test_the_digest_is_the_sha256_of_the_canonical_json_without_the_idempotency_key():
    without_key = CANONICAL.replace('"idempotency_key":"k1"', '"idempotency_key":""')
    assert countersign.spec_digest(SPEC) == hashlib.sha256(without_key.encode()).hexdigest()


def test_the_digest_ignores_the_idempotency_key_but_nothing_else():
    import dataclasses

    other_key = dataclasses.replace(SPEC, idempotency_key="another")
    assert countersign.spec_digest(other_key) == countersign.spec_digest(SPEC)
    for change in (
        {"reason": SPEC.reason + "!"},
        {"cls": "destructive"},
        {"parameters": {**SPEC.parameters, "b": 2}},
        {"labels": {}},
        {"force_approve_no_sop": True},
    ):
        assert countersign.spec_digest(dataclasses.replace(SPEC, **change)) != countersign.spec_digest(SPEC), change
