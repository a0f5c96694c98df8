"""The C kernels (dpcurator/random/samplers/_kernel.c) decide every word as the pure Python
reference does (issue 26 item 2).

Words are crafted where the decisions change: the inversion's undecided bands around each integer
count (|frac(z) - 1/2| = margin), the Bernoulli(exp(-x)) margin (d = ±δ), the table brackets
(lo, lo + width), the small-word cut (v = 2^39), and sweeps of offsets ±2^j around each, so that
consecutive words fall on both sides of every boundary in float64. For each word the kernel path
(the sampler functions, fed the words by a scripted generator) and the reference (one word at a
time in Python floats or integers) must give the same value or the same undecided call, in the
same order; every decided value must also be the exact one. The exact fallbacks are replaced by
recorders, so that the words they would decide stay visible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpcurator.random import SeededRng
from dpcurator.random.samplers import _kernel, gaussian, inversion
from tests.test_samplers import MPF
from tests.test_samplers_fast import ScriptedRng, _words

#: Offsets ±2^j around a crafted boundary word: the float boundary falls between two of them.
OFFSETS = sorted({0} | {sign * 2**j for j in range(0, 27, 2) for sign in (1, -1)})
SMALL = [2**39 - 2, 2**39 - 1, 2**39, 2**39 + 1]
TOP = 2**63 - 1


def _around(v: int) -> Iterator[int]:
    for offset in OFFSETS:
        if 1 <= v + offset <= TOP:
            yield v + offset


def _v_for(log_target: mpmath.mpf) -> int:
    """The v with ln(v + 1/2) nearest ``log_target``."""
    return int(mpmath.nint(mpmath.exp(log_target) - MPF(0.5)))


class Recorder:
    """Stands in for an exact fallback: records its arguments after the generator and answers
    from a fixed rule of the call count."""

    def __init__(self, answer: Callable[[int], object]) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.answer = answer

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls.append(args[1:] + tuple(sorted(kwargs.items())))
        return self.answer(len(self.calls))


def test_quick_log_is_within_its_bound() -> None:
    """The kernels' first log is within 2^-45 of ln m on [2^39, 2^63] (their slack assumes it):
    random arguments, every table cell's ends and the interval's ends, against mpmath."""
    generator = np.random.default_rng(5)  # test data only
    ms = [float(m) for m in generator.integers(2**39, 2**63, size=2000, dtype=np.int64)]
    cells = [2.0**e * (1 + j / 128) for e in (39, 45, 62) for j in range(128)]
    ms += cells + [math.nextafter(m, 0) for m in cells[1:]] + [2.0**39, 2.0**63]
    with mpmath.workdps(40):
        worst = max(abs(MPF(_kernel.quick_log(m)) - mpmath.log(MPF(m))) for m in ms)
    assert worst < 2.0**-45


def _inversion_words(s: int, t: int, two_sided: bool) -> list[int]:
    inv, offset = inversion._inversion_constants(s, t, two_sided)
    eta = MPF(0.5) - MPF(inversion._inversion_margin(inv))
    kmax = math.floor((offset - 39 * math.log(2)) * inv)
    ks = sorted({0, 1, 2, kmax - 1, kmax} | {kmax * j // 23 for j in range(24)})
    values = list(SMALL)
    with mpmath.workdps(60):
        for k in ks:
            for z in (k - eta, k + eta):
                values.extend(_around(_v_for(MPF(offset) - z / MPF(inv))))
    return [2 * v + bit for v in values for bit in (0, 1)]


@pytest.mark.parametrize(
    ("s", "t", "two_sided"),
    [(2, 1, True), (1, 1, True), (3, 7, True), (3, 7, False), (1, 10, True), (1, 10**6, True)],
)
def test_inversion_kernel_decides_every_word_as_the_reference(
    monkeypatch: pytest.MonkeyPatch, s: int, t: int, two_sided: bool
) -> None:
    words = _inversion_words(s, t, two_sided)
    sentinel = 10**15  # the exact path's answer, recognisable in the output
    kernel_calls = Recorder(lambda _: sentinel)
    monkeypatch.setattr(inversion, "_magnitude_exact", kernel_calls)
    got = inversion.inversion_magnitudes(ScriptedRng(_words(words)), s, t, len(words), two_sided)
    reference_calls = Recorder(lambda _: sentinel)
    monkeypatch.setattr(inversion, "_magnitude_exact", reference_calls)
    expected = [inversion.magnitude_of_word(ScriptedRng(b""), w, s, t, two_sided) for w in words]
    assert got.tolist() == expected
    assert kernel_calls.calls == reference_calls.calls
    undecided = sum(abs(value) == sentinel for value in expected)
    assert 0 < undecided < len(words)  # both sides of the boundaries were reached
    monkeypatch.undo()
    extra = SeededRng(1)  # the decided values are the exact counts, whatever U's further bits
    for word, value in zip(words, expected, strict=True):
        if abs(value) != sentinel:
            k = inversion._magnitude_exact(extra, word >> 1, 63, s, t, two_sided=two_sided)
            assert value == (-k if two_sided and word & 1 else k)


def _bexp_words(x: float) -> list[int]:
    delta = MPF(inversion._BEXP_DELTA)
    values = list(SMALL)
    with mpmath.workdps(60):
        for y in (MPF(x) - delta, MPF(x), MPF(x) + delta):
            if y <= 24 * math.log(2):
                values.extend(_around(_v_for(MPF(inversion._LN2_63) - y)))
    return [2 * v + bit for v in values for bit in (0, 1)]


def test_bexp_kernel_decides_every_word_as_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    xs = [0.0, 2.0**-30, 0.3, 1.0, 7.25, 16.0, 30.0]
    words = [w for x in xs for w in _bexp_words(x)]
    x = np.array([v for v in xs for _ in _bexp_words(v)])
    answer = Recorder(lambda calls: calls % 3 == 0)
    monkeypatch.setattr(inversion, "lazy_below_exp", answer)
    got = inversion.bexp_words(ScriptedRng(_words(words)), x, lambda i: (i, 1))
    kernel_calls, answer.calls = answer.calls, []
    expected = [
        inversion.bexp_of_word(ScriptedRng(b""), w, float(xi), lambda i=i: (i, 1))
        for i, (w, xi) in enumerate(zip(words, x, strict=True))
    ]
    assert got.tolist() == expected
    assert kernel_calls == answer.calls
    assert 0 < len(kernel_calls) < len(words)
    monkeypatch.undo()
    with mpmath.workdps(40):  # decided words: U < e^-x over U's whole interval, or above it
        for i, (w, xi) in enumerate(zip(words, x, strict=True)):
            v = w >> 1
            if all(call[0] != v for call in kernel_calls if call[3] == 1):
                threshold = mpmath.exp(-MPF(float(xi))) * 2**63
                assert (v + 1 <= threshold) if got[i] else (v >= threshold), (i, w, xi)


def _gaussian_cases(target: gaussian._Target) -> tuple[list[int], list[int]]:
    """Proposals ±m and crafted test words near each magnitude's decision boundaries."""
    proposals: list[int] = []
    words: list[int] = []
    centre = round(target.mu)
    sd = 1 / target.inv_sd
    for m in sorted({0, 1, centre, centre + round(2 * sd), max(0, centre - round(3 * sd))}):
        a = (m - target.mu) * target.inv_sd
        for word in _bexp_words(a * a):
            proposals.append(-m if word & 2 else m)
            words.append(word)
    return proposals, words


def test_gaussian_log_kernel_keeps_the_proposals_the_reference_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = gaussian._Target(Fraction(10**5, 3))  # σ above the table's range: the log test
    assert target.table is None
    proposals, words = _gaussian_cases(target)
    answer = Recorder(lambda calls: calls % 2 == 0)
    monkeypatch.setattr(inversion, "lazy_below_exp", answer)
    buffer = np.array(proposals, dtype=np.int64)
    signed_words = np.array(words, dtype=np.uint64).view(np.int64)
    got = inversion.bexp_proposals(
        ScriptedRng(b""),
        buffer,
        signed_words,
        mu=target.mu,
        inv_sd=target.inv_sd,
        exponent=target.exponent,
    )
    kernel_calls, answer.calls = answer.calls, []
    expected = []
    for y, w in zip(proposals, words, strict=True):
        a = (abs(y) - target.mu) * target.inv_sd
        if inversion.bexp_of_word(ScriptedRng(b""), w, a * a, lambda y=y: target.exponent(abs(y))):
            expected.append(y)
    assert got.tolist() == expected
    assert kernel_calls == answer.calls
    assert 0 < len(kernel_calls) < len(words)


@pytest.mark.parametrize("sigma", [Fraction(1, 2), Fraction(7, 3), 10])
def test_gaussian_table_kernel_keeps_the_proposals_the_reference_accepts(
    monkeypatch: pytest.MonkeyPatch, sigma: Fraction
) -> None:
    target = gaussian._Target(Fraction(sigma))
    assert target.table is not None
    lo, width = (table.tolist() for table in target.table)
    proposals: list[int] = []
    words: list[int] = []
    for m in [*range(len(lo) + 3), 2**40]:
        row = min(m, len(lo) - 1)
        for w in (lo[row], lo[row] + width[row]):
            for step in (-2, -1, 0, 1):
                proposals.append(-m if step % 2 else m)
                words.append((w + step) % 2**64)
    answer = Recorder(lambda calls: calls % 2 == 1)
    monkeypatch.setattr(gaussian, "lazy_below_exp", answer)
    buffer = np.array(proposals, dtype=np.int64)
    signed_words = np.array(words, dtype=np.uint64).view(np.int64)
    got = gaussian._accepted(ScriptedRng(b""), target, buffer, signed_words)
    kernel_calls, answer.calls = answer.calls, []
    expected = []
    for y, w in zip(proposals, words, strict=True):
        row = min(abs(y), len(lo) - 1)
        if (w - lo[row]) % 2**64 < width[row]:
            if answer(ScriptedRng(b""), w, 64, *target.exponent(abs(y))):
                expected.append(y)
        elif w < lo[row]:
            expected.append(y)
    assert got.tolist() == expected
    assert kernel_calls == answer.calls
    assert 0 < len(kernel_calls) < len(words)
