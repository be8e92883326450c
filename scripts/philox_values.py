#!/usr/bin/env python3
"""The expected values of tests/test_rng.c's test_philox_matches_reference_values, from a
Philox4x32-10 written here from the paper (Salmon et al., SC'11), independently of tensor/rng.c,
and checked against Random123's three known-answer vectors for philox4x32_10 first.

attograd's layout: block b's counter words are (b lo, b hi, 0x9E3779B9, 0xBB67AE85) and its key
(seed lo, seed hi); draw d is half of block d >> 1 (mod 2^63): words 0, 1 when d is even, 2, 3
when odd, and its uniform is ((w_a << 21) ^ (w_b >> 11)) * 2^-53. Normal i from counter c is
sqrt(-2 log(1 - u(c + 2i))) cos(2 pi u(c + 2i + 1)). Element e of a dropout mask at counter c is
the 32-bit word e % 2 of draw c + e // 2 (the first or second of its two words).

usage: python3 scripts/philox_values.py (no third-party modules)"""
import math

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
    return c0, c1, c2, c3


KAT = [  # Random123 kat_vectors: philox4x32 10 rounds, ctr, key -> expected
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def words(seed, d):
    """the two 32-bit words of draw d"""
    d &= (1 << 64) - 1
    b = (d >> 1) & ((1 << 63) - 1)
    w = philox4x32_10((b & MASK32, b >> 32, W0, W1), (seed & MASK32, seed >> 32))
    return (w[0], w[1]) if d % 2 == 0 else (w[2], w[3])


def draw(seed, d):
    a, c = words(seed, d)
    return (((a << 21) ^ (c >> 11)) & ((1 << 53) - 1)) * 2.0**-53


def mask_word(seed, counter, e):
    return words(seed, counter + e // 2)[e % 2]


def normal(seed, counter, i):
    u1, u2 = draw(seed, counter + 2 * i), draw(seed, counter + 2 * i + 1)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


def main():
    for ctr, key, want in KAT:
        assert philox4x32_10(ctr, key) == want, (ctr, key)
    s2 = (7 << 32) | 5
    rows = [
        ("seed 42, draws 0..2", [draw(42, d) for d in range(3)]),
        ("seed 42, draw 1000001", [draw(42, 1000001)]),
        ("seed 42, normal 0 from counter 0", [normal(42, 0, 0)]),
        ("seed 42, normal 0 from counter 1000001", [normal(42, 1000001, 0)]),
        ("seed 7<<32|5, draw 0", [draw(s2, 0)]),
        ("seed 7<<32|5, draw (1<<33)+7", [draw(s2, (1 << 33) + 7)]),
        ("seed 7<<32|5, normal 0 from counter (1<<33)+6", [normal(s2, (1 << 33) + 6, 0)]),
        ("seed 42, mask words 0..5 from counter 0", [mask_word(42, 0, e) for e in range(6)]),
        ("seed 42, mask words 0..2 from counter 1000001", [mask_word(42, 1000001, e) for e in range(3)]),
        ("seed 7<<32|5, mask word 3 from counter (1<<33)+7", [mask_word(s2, (1 << 33) + 7, 3)]),
        ("seed 7<<32|5, mask word 1 from counter 2^64-1", [mask_word(s2, (1 << 64) - 1, 1)]),
    ]
    for name, vals in rows:
        print(f"{name}: " + ", ".join(hex(v) if isinstance(v, int) else repr(v) for v in vals))


if __name__ == "__main__":
    main()
