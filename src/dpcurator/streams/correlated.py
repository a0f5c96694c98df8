"""Continual counting under ρ-zCDP with correlated discrete Gaussian noise: a Buffered Linear
Toeplitz approximation of the square-root factorization.

A stream of events x_1, x_2, ... (counts, or values clamped to public bounds) arrives in batches;
after every event the curator releases the running total. The prefix sums are A x with A the
lower-triangular all-ones matrix; a factorization A = B C gives the mechanism "release
y = C x + z, answer B y = A x + B z" (Denisov, McMahan, Rush, Smith & Thakurta 2022). The
square-root factorization C = B = A^(1/2) is within an additive constant of the best worst-step
error (Fichtenberger, Henzinger & Upadhyay 2023; Henzinger, Upadhyay & Upadhyay 2023): at
T = 2^20 its variance factor max_t ‖B_t‖² · max_j ‖C_j‖² is 30.0, against 420 for the binary tree.
Here C is a Buffered Linear Toeplitz matrix (BLT: Dvijotham, McMahan, Pillutla, Steinke &
Thakurta 2024; :mod:`dpcurator.streams.toeplitz`), c_0 = 1, c_k = Σ_i ω_i θ_i^(k-1), fitted to
the horizon (:data:`~dpcurator.streams._blt_table.BLT_TABLE`: within 0.3% of the square-root
factorization's factor up to T = 2^24, 2.6% at 2^36): C x and C^(-1) y are computed in O(d)
memory with d <= 8 buffers.

**The integer lattice.** Discrete Gaussian noise is only private on integer-valued statistics
(Canonne, Kamath & Steinke 2020, Theorem 4: for f: X -> Z^n of L2 sensitivity Δ, f(x) + Z with
Z iid discrete Gaussian of parameter σ is ρ-zCDP with ρ = Δ² / (2σ²)), and C x is real. The
curator therefore releases y_t = F_t(x) + Z_t where F_t(x) is C x on the lattice 2^-P (P public,
chosen from ρ and the bounds so that σ is near 2^30 lattice steps), computed in exact integer
arithmetic: the buffers hold S_i on the finer lattice 2^-(P+G) (G >= 64 guard bits), each step
rounds θ_i S_i and ω_i S_i to it and F_t is the total rounded to the lattice 2^-P. Each buffer's
accumulated rounding is at most 1 / (2(1 - θ_i)) fine steps, so |F_t(x) - 2^P (C x)_t| <= 1/2 + η
with η = Σ_i (ω_i / (2(1 - θ_i)) + 1/2) / 2^G (below 2^-64), and for neighbouring streams
|F_t(x) - F_t(x')| <= 2^P |C(x - x')|_t + 1 + 2η. By Minkowski's inequality over the at most
L = ``horizon`` (or 2^36, unknown horizon) released steps,

    ‖F(x) - F(x')‖₂ <= 2^P · k · span · ‖C‖_col + (1 + 2η) · sqrt(L)  =:  Δ,

with span = upper - lower in grid units, k the events of one privacy unit (1 at event level,
``max_events_per_person`` at user level: the k columns of C that a person's events touch, each
scaled by at most span, by the triangle inequality) and ‖C‖_col the largest column norm of C over
L steps, bounded above exactly in Fractions
(:func:`~dpcurator.streams.toeplitz.column_norm_squared_bound`).
The noise is :class:`~dpcurator.mechanisms.Gaussian` built for ρ and Δ, so the whole sequence of
releases is ρ-zCDP for one event (one person). The rounding slack sqrt(L) is charged, not
ignored; it costs below 0.1% of σ when the horizon is given, and up to a few percent at tiny ρ
with an unknown horizon. The releases are a stream adaptively chosen by an analyst who sees
earlier outputs too: every step adds fresh noise Z_t to a function of the events so far whose
squared differences sum to at most Δ² on every path, so the fully adaptive Rényi composition of
Feldman & Zrnic (2021) gives the same ρ.

**What is released** is post-processing of the integer y: w = C^(-1) y / 2^P in floating point
(the BLT recursion solved for x), the running sum of w, rounded to the stream's resolution (1 for
counts). No float depends on the data except through y, whose noise is exact. (The encoder
works on units - lower, in [0, span], and adds t · lower back: public.)

**Accuracy.** The released total at t is the clamped running sum plus Σ_j (B_t)_j Z_j / 2^P, plus
at most (1/2 + η) · 2^-P · ‖B_t‖₁ from the lattice, half a step of output rounding and, for sums,
t · resolution / 2 of input rounding. The discrete Gaussian's variance is below σ² and its moment
generating function at most the continuous one's (CKS20, §2: it is σ-sub-Gaussian), so the noise
has variance at most σ² ‖B_t‖² / 4^P (:meth:`CorrelatedContinualSum.variance`) and
:meth:`~CorrelatedContinualSum.ci_halfwidth` is the sub-Gaussian bound σ ‖B_t‖ 2^-P sqrt(2 ln(2/α))
plus those deterministic terms (‖B_t‖₁ <= sqrt(t) ‖B_t‖₂): with probability at least 1 - α the
release at t is within it of the true (clamped) running sum (the decoder's floating-point
rounding, of the order of t · 2^-52 of the magnitudes it adds, is not counted).

**Unknown horizon.** ``horizon=None`` uses the ``ANYTIME`` BLT of the table, fitted to keep the
variance factor within 1.91 times the square-root factorization's at t for every power of two t
from 2^4 to 2^36 (2.3 times at t = 2; its columns have bounded norm however long the stream
runs; Jacobsen & Fawaz reach 1.5 times with another construction); its privacy holds for up to
2^36 events, after which updates are refused.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.core.numbers import float_up, to_fraction
from dpcurator.mechanisms import Gaussian
from dpcurator.random import Rng, default_rng
from dpcurator.streams._blt_table import ANYTIME, BLT_TABLE
from dpcurator.streams._events import EventGrid, GridStream, check_batch
from dpcurator.streams.toeplitz import FloatArray, column_norm_squared_bound, row_norm_squared

__all__ = ["ANYTIME_LIMIT", "CorrelatedContinualSum"]

#: Events an unknown-horizon stream may take (the rounding slack is charged for this many).
ANYTIME_LIMIT = 2**36
#: The lattice is chosen so that σ is at most this many lattice steps (the sampler takes 2^31).
_TARGET_SIGMA = 2**30
_GUARD_BITS = 64
_MIN_LATTICE_BITS = -60
#: Steps decoded at once (the decoder's block matrices are public constants, cached).
_BLOCK = 64
#: Largest |F_t| accepted (int64 noise addition; decided at construction).
_MAX_LATTICE = 2**61
_SQRT_BITS = 40
#: Relative margin on the floating-point row norm of B (the CI only, not the privacy).
_MARGIN = 1e-6


def _sqrt_up(value: Fraction) -> Fraction:
    """A dyadic upper bound on sqrt(value) (exact integer square root at 2^-40)."""
    scaled = value * 4**_SQRT_BITS
    root = math.isqrt(math.ceil(scaled))
    if root * root < scaled:
        root += 1
    return Fraction(root, 2**_SQRT_BITS)


def _dyadic(value: float) -> tuple[int, int]:
    """(n, s) with value = n / 2^s exactly (floats are binary rationals)."""
    exact = Fraction(value)
    return exact.numerator, exact.denominator.bit_length() - 1


def blt_parameters(horizon: int | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(θ_i, ω_i) of the BLT for a horizon (the table's row for the smallest tabulated power of
    two at least the horizon), or the anytime BLT for ``None``."""
    if horizon is None:
        lam, omega = ANYTIME
    else:
        exponent = max(1, (horizon - 1).bit_length())
        lam, omega = BLT_TABLE[min(e for e in BLT_TABLE if e >= exponent)]
    return tuple(math.exp(-v) for v in lam), tuple(omega)


@functools.lru_cache(maxsize=64)
def _decoder_blocks(
    thetas: tuple[float, ...], omegas: tuple[float, ...]
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The decoder's block matrices for blocks of m = ``_BLOCK`` steps (public constants):
    w = R u - Φ W_0 with R the m × m lower-triangular Toeplitz matrix of C^(-1)'s coefficients
    r_0 = 1, r_k = -ω·N^(k-1) 1, Φ_j = ω·N^j; W_n = N^n W_0 + K[:, m-n:] u with K's column
    m-1-i equal to N^i 1. N = diag(θ) - 1 ω^T."""
    theta, omega = np.array(thetas), np.array(omegas)
    d, m = theta.size, _BLOCK
    step = np.diag(theta) - np.outer(np.ones(d), omega)
    phi = np.empty((m, d))
    inputs = np.empty((d, m))
    powers = np.empty((m + 1, d, d))
    row, column, power = omega.copy(), np.ones(d), np.eye(d)
    for j in range(m):
        phi[j], inputs[:, m - 1 - j], powers[j] = row, column, power
        row, column, power = row @ step, step @ column, step @ power
    powers[m] = power
    r = np.concatenate(([1.0], -phi[:-1].sum(axis=1)))
    index = np.arange(m)
    lags = index[:, None] - index[None, :]
    inverse = np.where(lags >= 0, r[np.clip(lags, 0, None)], 0.0)
    return inverse, phi, inputs, powers


class CorrelatedContinualSum(GridStream):
    """Running sums of a bounded stream released after every event, ρ-zCDP, with correlated
    discrete Gaussian noise (a BLT factorization; see the module docstring for the guarantee).

    >>> from dpcurator.random import SeededRng
    >>> counter = CorrelatedContinualSum.counter(rho=0.5, horizon=1000)
    >>> counter.update([1, 0, 1, 1], rng=SeededRng(3)).shape
    (4,)
    >>> counter.rho_spent <= 0.5
    True
    """

    def __init__(
        self,
        rho: object,
        horizon: int | None = None,
        lower: float = 0.0,
        upper: float = 1.0,
        resolution: float | None = None,
        *,
        max_events_per_person: int | None = None,
    ) -> None:
        owner = "CorrelatedContinualSum"
        self.rho = to_fraction(check_positive(owner, "rho", rho))
        if horizon is not None:
            check_int(owner, "horizon", horizon, minimum=1)
            if horizon > ANYTIME_LIMIT:
                raise fail(owner, "horizon", "at most 2**36 (or None)", horizon)
        self.horizon = horizon
        self.limit = ANYTIME_LIMIT if horizon is None else horizon
        self.grid = EventGrid(owner, lower, upper, resolution, max_events_per_person)
        thetas, omegas = blt_parameters(horizon)
        self.thetas, self.omegas = np.array(thetas), np.array(omegas)
        exact_t = [Fraction(t) for t in thetas]
        exact_w = [Fraction(w) for w in omegas]
        self.column_norm_squared = column_norm_squared_bound(exact_t, exact_w, self.limit)
        pairs = zip(exact_t, exact_w, strict=True)
        fine_error = sum((w / (2 * (1 - t)) + Fraction(1, 2) for t, w in pairs), Fraction(0))
        guard = _GUARD_BITS + math.ceil(fine_error).bit_length()
        eta = fine_error / 2**guard
        slack = (1 + 2 * eta) * _sqrt_up(Fraction(self.limit))
        self.lattice_bits = self._lattice(owner, slack)
        main = _sqrt_up(
            Fraction(2) ** (2 * self.lattice_bits)
            * (self.grid.events * self.grid.span) ** 2
            * self.column_norm_squared
        )
        self.sensitivity = main + slack
        row_l1 = 1 + sum(
            w / (1 - t) for t, w in zip(exact_t, exact_w, strict=False)
        )  # max_t Σ_k c_k
        if Fraction(2) ** self.lattice_bits * self.grid.span * row_l1 >= _MAX_LATTICE:
            raise fail(owner, "rho", "a smaller value for these bounds", float(self.rho),
                       "Use a coarser resolution.")  # fmt: skip
        self.mechanism = Gaussian.for_rho_squared(self.rho, self.sensitivity**2)
        self._guard = max(guard, -self.lattice_bits)
        self._shift = self.lattice_bits + self._guard  # fine lattice 2^-(P+G), P + G >= 0
        self._eta = eta
        self._theta_dyadic = [_dyadic(t) for t in thetas]
        self._omega_dyadic = [_dyadic(w) for w in omegas]
        self.time = 0
        self._encoder = [0] * len(thetas)  # S_i on the fine lattice (exact integers)
        self._decoder = [0.0] * len(thetas)  # W_i of the C^(-1) recursion (post-processing)
        self._released = 0.0  # running sum of w, in grid units

    def _lattice(self, owner: str, slack: Fraction) -> int:
        """The largest P with σ = Δ(P) / sqrt(2ρ) <= 2^30 lattice steps (public)."""
        per_unit = float(self.grid.events * self.grid.span) * math.sqrt(
            float(self.column_norm_squared)
        )
        room = _TARGET_SIGMA * math.sqrt(2 * float(self.rho)) - float(slack)
        if room <= 0:
            raise fail(
                owner,
                "rho",
                f"at least {float_up(float(slack) ** 2 / 2**61):.3g} for this horizon",
                float(self.rho),
                "Give a horizon, or a larger rho.",
            )
        bits = math.floor(math.log2(room / per_unit))
        while True:
            main = _sqrt_up(Fraction(4) ** bits * (self.grid.events * self.grid.span) ** 2
                            * self.column_norm_squared)  # fmt: skip
            if (main + slack) ** 2 <= 2 * self.rho * _TARGET_SIGMA**2:
                return bits
            bits -= 1
            if bits < _MIN_LATTICE_BITS:
                raise fail(owner, "rho", "a larger value for this horizon", float(self.rho))

    @classmethod
    def counter(
        cls, rho: object, horizon: int | None = None, *, max_events_per_person: int | None = None
    ) -> CorrelatedContinualSum:
        """A running count of 0/1 events (any non-zero value counts as 1, NaN as 0)."""
        made = cls(rho, horizon, 0, 1, 1, max_events_per_person=max_events_per_person)
        made.grid.counting = True
        return made

    @property
    def rho_spent(self) -> Fraction:
        """ρ of the whole stream of releases (per event, or per person at user level; exact)."""
        return self.mechanism.rho(self.sensitivity)

    def _encode(self, units: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """F_t(x): (C x)_t on the lattice 2^-P, exactly in integers (see the module docstring)."""
        shift, guard = self._shift, self._guard
        half = 1 << (guard - 1)
        thetas = [(n, s, (1 << (s - 1)) if s else 0) for n, s in self._theta_dyadic]
        omegas = [(n, s, (1 << (s - 1)) if s else 0) for n, s in self._omega_dyadic]
        state = self._encoder
        out = np.empty(units.size, dtype=np.int64)
        for index, unit in enumerate(units.tolist()):
            fine = unit << shift
            total = fine
            for (n, s, h), value in zip(omegas, state, strict=True):
                total += (n * value + h) >> s
            out[index] = (total + half) >> guard
            state = [((n * v + h) >> s) + fine for (n, s, h), v in zip(thetas, state, strict=True)]
        self._encoder = state
        return out

    def _decode(self, noisy: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The running sums of C^(-1) y / 2^P (floating point, a function of y only), by blocks
        of the recursion W_(j+1) = N W_j + 1 u_j, w_j = u_j - ω·W_j (:func:`_decoder_blocks`)."""
        inverse, phi, inputs, powers = _decoder_blocks(tuple(self.thetas), tuple(self.omegas))
        u = noisy.astype(np.float64) * math.ldexp(1.0, -self.lattice_bits)
        state = np.array(self._decoder)
        total = self._released
        out = np.empty(u.size, dtype=np.float64)
        for begin in range(0, u.size, _BLOCK):
            block = u[begin : begin + _BLOCK]
            n = block.size
            w = inverse[:n, :n] @ block - phi[:n] @ state
            sums = total + np.cumsum(w)
            out[begin : begin + n] = sums
            total = float(sums[-1])
            state = powers[n] @ state + inputs[:, _BLOCK - n :] @ block
        self._decoder, self._released = state.tolist(), total
        return out

    def update(
        self,
        values: npt.ArrayLike,
        rng: Rng | None = None,
        persons: Sequence[int | str] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Ingest a batch of events; return the released running sum after each of them.

        The batch length is public (the clock); a batch past the horizon (or 2^36 events) is
        refused before anything is ingested. A user-level stream needs ``persons``.
        """
        owner = "CorrelatedContinualSum.update"
        units = self.grid.units(values, persons, owner)
        check_batch(owner, self.time, units.size, self.limit)
        self.grid.cap(units, persons)
        offset = self.grid.lo_units  # public: the stream of units - lower is in [0, span]
        encoded = self._encode(units - offset)
        noisy = self.mechanism.release_integers(encoded, rng or default_rng())
        times = np.arange(self.time + 1, self.time + units.size + 1, dtype=np.float64)
        self.time += units.size
        released = np.rint(self._decode(noisy)) + times * offset
        return released * float(self.grid.resolution)

    def variance(self, time: int | None = None) -> float:
        """An upper bound on the noise variance of the release at ``time`` (default: the latest),
        in the values' units²: σ² ‖B_t‖² / 4^P (public)."""
        t = self.time if time is None else check_int("variance", "time", time, minimum=1)
        rows = row_norm_squared(self.thetas, self.omegas, t) * (1 + _MARGIN)
        step = math.ldexp(float(self.grid.resolution), -self.lattice_bits)
        return float(self.mechanism.sigma) ** 2 * rows * step**2

    def ci_halfwidth(self, time: int | None = None, alpha: object = 0.05) -> float:
        """Half-width of a (1-α) interval for the release at ``time`` (default: the latest).

        Public: it depends on the time, ρ, the bounds and the resolution only.
        """
        t = self.time if time is None else check_int("ci_halfwidth", "time", time, minimum=1)
        a = float(check_probability("ci_halfwidth", "alpha", alpha, open_low=True, open_high=True))
        sd = math.sqrt(self.variance(t))
        noise = sd * math.sqrt(2 * math.log(2 / a))
        step = float(self.grid.resolution)
        lattice = (0.5 + float(self._eta)) * math.sqrt(t) * sd / float(self.mechanism.sigma)
        rounding = step / 2 + self.grid.rounding(t)
        return float_up(Fraction(noise) + Fraction(lattice) + Fraction(rounding))

    def to_state(self) -> dict[str, Any]:
        """The curator state to persist (JSON-able): the exact buffers, the decoder's buffers
        and running total, the clock and, at user level, each person's events kept."""
        return {
            "time": self.time,
            "encoder": [str(v) for v in self._encoder],
            "decoder": list(self._decoder),
            "released": self._released,
            "persons": sorted(self.grid.events_per_person.items(), key=repr),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`to_state` of a stream built with the same public parameters."""
        self.time = int(state["time"])
        self._encoder = [int(v) for v in state["encoder"]]
        self._decoder = [float(v) for v in state["decoder"]]
        self._released = float(state["released"])
        self.grid.events_per_person = {p: int(n) for p, n in state.get("persons", [])}

    def state_bytes(self) -> int:
        """Bytes of the mechanism's state (buffers, clock, total; not the user-level counts)."""
        ints = sum((abs(v).bit_length() + 8) // 8 for v in self._encoder)
        return ints + 8 * len(self._decoder) + 16
