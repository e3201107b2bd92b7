"""The canonical JSON of a proposal spec and its digest, byte for byte as the
server computes them (`ProposalSpec::canonical_json` and `::digest`): the
fields in declaration order, enums by name, every map's keys sorted, compact
separators, strings escaped as serde_json escapes them, and numbers (all of
them doubles, as in `google.protobuf.Struct`) in serde_json's float form.
"""

import hashlib
import json
import math
from typing import Any, List

from countersign.v1 import types_pb2

_CLASS_NAMES = {
    types_pb2.OPERATION_CLASS_READ: "read",
    types_pb2.OPERATION_CLASS_WRITE: "write",
    types_pb2.OPERATION_CLASS_DESTRUCTIVE: "destructive",
}
_BLAST_RADIUS_NAMES = {
    types_pb2.BLAST_RADIUS_SINGLE_DEVICE: "single_device",
    types_pb2.BLAST_RADIUS_CLUSTER: "cluster",
    types_pb2.BLAST_RADIUS_TENANT_WIDE: "tenant_wide",
}

# serde_json (through zmij) writes a double in plain notation when its
# decimal exponent is in this range, and as `d.ddde±N` outside it.
_PLAIN_EXPONENTS = range(-5, 16)


def number(value: float) -> str:
    """A finite double as serde_json writes it: the shortest digits that read
    back as the same double, `1.0` and `0.001` in plain notation,
    `1e+16` and `1.5e-7` beyond it."""
    if not math.isfinite(value):
        raise ValueError("numbers must be finite")
    text = repr(float(value))  # the shortest round-trip digits
    sign = ""
    if text.startswith("-"):
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # value = int(digits) * 10**scale
    scale = int(exponent or "0") - len(fraction)
    stripped = digits.rstrip("0")
    scale += len(digits) - len(stripped)
    digits = stripped
    if not digits:
        return sign + "0.0"
    first = scale + len(digits) - 1  # the decimal exponent of the first digit
    if first in _PLAIN_EXPONENTS:
        if len(digits) - 1 <= first:
            body = digits + "0" * (first - len(digits) + 1) + ".0"
        elif first >= 0:
            body = digits[: first + 1] + "." + digits[first + 1 :]
        else:
            body = "0." + "0" * (-first - 1) + digits
    else:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        body += "e" + ("-" if first < 0 else "+") + str(abs(first))
    return sign + body


def _string(value: str) -> str:
    # Escapes exactly what serde_json escapes: the quote, the backslash and
    # the control characters below U+0020 (lower-case \u00xx where it has no
    # short form); everything else, non-ASCII included, as it is.
    return json.dumps(value, ensure_ascii=False)


def _value(value: Any, out: List[str]) -> None:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        out.append("null")
    elif kind == "bool_value":
        out.append("true" if value.bool_value else "false")
    elif kind == "number_value":
        out.append(number(value.number_value))
    elif kind == "string_value":
        out.append(_string(value.string_value))
    elif kind == "struct_value":
        _object(value.struct_value.fields, out)
    else:
        out.append("[")
        for i, item in enumerate(value.list_value.values):
            if i:
                out.append(",")
            _value(item, out)
        out.append("]")


def _object(fields: Any, out: List[str]) -> None:
    out.append("{")
    for i, key in enumerate(sorted(fields)):
        if i:
            out.append(",")
        out.append(_string(key))
        out.append(":")
        _value(fields[key], out)
    out.append("}")


def canonical_json(spec: "types_pb2.ProposalSpec") -> str:
    """The server's canonical JSON of a wire spec."""
    try:
        cls = _CLASS_NAMES[getattr(spec, "class")]
    except KeyError:
        raise ValueError("spec.class: must be read, write or destructive") from None
    try:
        blast_radius = _BLAST_RADIUS_NAMES[spec.blast_radius]
    except KeyError:
        raise ValueError("spec.blast_radius: must be single_device, cluster or tenant_wide") from None
    out = ['{"action":', _string(spec.action), ',"class":"', cls, '","target":', _string(spec.target)]
    out.append(',"parameters":')
    _object(spec.parameters.fields, out)
    out += [',"reason":', _string(spec.reason), ',"blast_radius":"', blast_radius, '"']
    out += [',"operator":', _string(spec.operator)]
    out += [',"context_summary":', _string(spec.context_summary)]
    out += [',"incident_id":', _string(spec.incident_id), ',"labels":{']
    for i, key in enumerate(sorted(spec.labels)):
        out += ["," if i else "", _string(key), ":", _string(spec.labels[key])]
    out += ['},"rollback_plan":', _string(spec.rollback_plan)]
    out += [',"force_approve_no_sop":', "true" if spec.force_approve_no_sop else "false"]
    out += [',"idempotency_key":', _string(spec.idempotency_key), "}"]
    return "".join(out)


def digest(spec: "types_pb2.ProposalSpec") -> str:
    """Hex SHA-256 of the canonical JSON with the idempotency key cleared:
    what a receipt's `spec_digest` holds for this spec."""
    without_key = types_pb2.ProposalSpec()
    without_key.CopyFrom(spec)
    without_key.idempotency_key = ""
    return hashlib.sha256(canonical_json(without_key).encode("utf-8")).hexdigest()
