"""Ed25519 signature verification (RFC 8032, section 5.1.7) in pure Python.

The package depends only on grpcio and protobuf, so it carries its own
verifier. It checks signatures made by the server with a public key the caller
trusts; it handles no secret, so constant time does not matter here.
"""

import hashlib
from typing import Optional, Tuple

# A point in extended coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, x*y = T/Z.
_Point = Tuple[int, int, int, int]

_P = 2**255 - 19
# The order of the base point.
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_IDENTITY: _Point = (0, 1, 1, 0)


def _add(p: _Point, q: _Point) -> _Point:
    a = (p[1] - p[0]) * (q[1] - q[0]) % _P
    b = (p[1] + p[0]) * (q[1] + q[0]) % _P
    c = 2 * p[3] * q[3] * _D % _P
    d = 2 * p[2] * q[2] % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _double(p: _Point) -> _Point:
    a = p[0] * p[0] % _P
    b = p[1] * p[1] % _P
    c = 2 * p[2] * p[2] % _P
    h = a + b
    e = h - (p[0] + p[1]) * (p[0] + p[1])
    g = a - b
    f = c + g
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _negate(p: _Point) -> _Point:
    return (-p[0] % _P, p[1], p[2], -p[3] % _P)


def _equal(p: _Point, q: _Point) -> bool:
    return (p[0] * q[2] - q[0] * p[2]) % _P == 0 and (p[1] * q[2] - q[1] * p[2]) % _P == 0


def _decode(encoded: bytes) -> Optional[_Point]:
    """A point from its 32-byte encoding (RFC 8032, 5.1.3), or None."""
    if len(encoded) != 32:
        return None
    y = int.from_bytes(encoded, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        if sign:
            return None
        return (0, y, 1, 0)
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if (x & 1) != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


def _base_point() -> _Point:
    # y = 4/5, x even.
    point = _decode((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))
    assert point is not None
    return point


_BASE = _base_point()


def _combination(s: int, b: _Point, k: int, a: _Point) -> _Point:
    """[s]B + [k]A in one pass over the bits (Straus)."""
    table = (_IDENTITY, b, a, _add(b, a))
    acc = _IDENTITY
    for i in range(max(s.bit_length(), k.bit_length()) - 1, -1, -1):
        acc = _double(acc)
        index = ((s >> i) & 1) | (((k >> i) & 1) << 1)
        if index:
            acc = _add(acc, table[index])
    return acc


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether `signature` is `public_key`'s Ed25519 signature of `message`.

    Malformed keys and signatures (wrong length, a point off the curve, a
    non-canonical encoding, S not below the group order) do not verify.
    """
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decode(public_key)
    r = _decode(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    digest = hashlib.sha512(signature[:32] + public_key + message).digest()
    k = int.from_bytes(digest, "little") % _L
    # [S]B = R + [k]A, checked as [S]B + [k](-A) = R.
    return _equal(_combination(s, _BASE, k, _negate(a)), r)
