"""Private multiplicative weights: an interactive curator for many linear queries, one budget.

Hardt & Rothblum (2010), "A multiplicative weights mechanism for privacy-preserving data
analysis" (the "HR10 ... log|Q| sqrt(n)" line of Ligett's tutorial); the online variant through
the sparse vector test of Dwork & Roth (2014), section 4.2, with the noisy-answer update of
Hardt, Ligett & McSherry (2012, MWEM); the potential (KL) argument below is the MW analysis of
Gupta, Roth & Ullman (2012), "Iterative constructions and private data release".

The curator keeps a PUBLIC synthetic distribution ``p`` over the public domain ``X`` (product of
the columns' public keys or bins, :class:`~dpcurator.synth.domain.SynthDomain`) and a noisy row
count ``n~``. Both start from one Laplace release of every column's one-way marginal: ``p`` is
the product of the (non-negative, +1 smoothed) noisy marginals, ``n~`` the mean of their totals.
HR10 start from the uniform distribution; their analysis holds for any public starting point
(it enters only through ``KL(x/n || p)``, at most ``ln|X|`` for uniform), and this one is much
closer to real data, so far fewer updates are needed.

For each linear query ``w`` (a weight in [0, 1] per cell; counting queries are 0/1), with ``x``
the exact histogram:

1. the synthetic answer is ``a = n~ * <w, p>``;
2. the sparse vector test (:class:`~dpcurator.mechanisms.AboveThreshold`, one run per update)
   asks whether ``|<w, x> - a|`` is above the threshold ``T``; if not, ``a`` is the answer and
   nothing more is spent;
3. if it is, the curator releases ``y = <w, x> + Laplace`` (the project's
   :class:`~dpcurator.mechanisms.Laplace` on the float grid), answers ``y``, and updates
   ``p_i <- p_i * exp(w_i * s) / Z`` with ``s = clip((y - a) / (2 n~), -1, 1)``, replayed
   ``passes`` times over every update so far (MWEM's replay: post-processing of released
   values, free; ``passes=1`` is HR10's single step); a new sparse vector run starts (fresh
   threshold noise) for the next query. When the query counts ONE cell of a marginal of at
   most ``max_marginal_cells`` cells (``a = u AND b = v``), the update releases that whole
   marginal instead (integer discrete Laplace, same ε: its cells partition the histogram, so
   its L1 sensitivity is the same Δ), answers the noisy cell and steps every cell of the
   marginal (:mod:`~dpcurator.interactive.pmw_updates`). Which of the two runs is a function
   of the query alone.

**Defaults from public inputs.** ``c = d(d-1)`` for ``d`` columns (two updates per pair of
columns: a 2-way marginal measured, then measured again if noise or a 3-way query needs it) and
``T = b·ln(2k/c)`` (at least ``b``), ``b`` the sparse vector's query-noise scale ``4Δ/ε_s`` and
``k`` the expected number of queries: when the synthetic answers are right, noise alone sets off
an update with probability about ``exp(-T/b)/2``, so about ``c/4`` of the ``c`` updates over ``k``
queries. The learning rate is MWEM's ``1/(2n~)`` (larger ones fitted the noise on Adult).

After ``max_updates`` updates every further query is refused (BudgetExceededError, free): how
many updates happened is a function of released sparse-vector outcomes, so the refusal is public.

A curator is kept between requests (the service's PMW mode, :mod:`dpcurator.service.stores.pmw`)
as :meth:`~PrivateMultiplicativeWeights.parameters` (public) and
:meth:`~PrivateMultiplicativeWeights.to_bytes` (private: the exact histogram and the open
sparse-vector run's noisy threshold), and rebuilt by :meth:`~PrivateMultiplicativeWeights.restore`
without a second charge; the run's threshold is kept, never redrawn (a fresh threshold per
request would be a new, unpaid AboveThreshold run).

**Privacy** (pure ε-DP, by basic composition of the releases, not HR10's advanced-composition
analysis): the one-way marginals at ``ε_n = prior_fraction·ε`` (L1 sensitivity ``d·Δ`` for ``d``
columns: each is a 0/1 map of the histogram), and ``c = max_updates`` rounds each of one
AboveThreshold run at ``ε_s`` and one Laplace release at ``ε_u``, where ``ε_s = svt_fraction·ε_r``,
``ε_u = ε_r - ε_s``, ``ε_r = (ε - ε_n) / c``, each of sensitivity ``Δ = r·min(g, |X|)`` (a person
moves the bounded histogram by at most ``Δ`` in L1, so any query with weights in [0, 1], and any
marginal, by at most ``Δ``). Total ``ε_n + c(ε_s + ε_u) = ε``, charged once, as one PureEvent
of ε, at construction, before the engine computes the histogram ONCE (one GROUP BY with the
public cells as keys, through the session: user-level bounding and the budget filter apply).
Queries never touch the engine again.

**Accuracy** (:meth:`PrivateMultiplicativeWeights.error_bound`, exact discrete tails): with
probability at least 1 - β, each of the first ``k`` answers is within
``max(T + t_thr + t_q + grid, t_upd)`` of the truth, with ``t_thr`` the tail of the threshold
noise at level β/(3c), ``t_q`` of the query noise at β/(3k), ``t_upd`` of the update noise at
β/(3c). The bound holds whatever the data; what the multiplicative weights buy is that the
updates do not run out: each update on a query whose error is at least ``T'`` (normalised:
``T'/n``) lowers ``KL(x/n || p)`` by about ``(T'/n)²/4``, and it starts at ``K0 =
KL(x/n || p0)`` (at most ``ln|X|`` from uniform), so about ``4 n² K0 / T'²`` updates suffice for
ANY number of queries (HR10, Theorem 1.2's potential argument).
Balancing ``T`` against the sparse-vector noise (order ``c·ln(k)/ε`` under
basic composition) gives error ``O((n² ln|X| ln(k) / ε)^(1/3))`` per query for k queries; HR10's
``O(sqrt(n)·ln(k)·ln|X|^(1/4)/sqrt(ε))`` needs advanced composition (δ > 0), not offered here.
Independent Laplace answers at the same total ε have error of order ``k/ε``.

**Per-answer intervals** (:meth:`~PrivateMultiplicativeWeights.ask`,
:meth:`~PrivateMultiplicativeWeights.interval`): each answer comes with a (1 - α) interval for
its exact answer and its ``source``:
``update`` (a noisy measurement: ``y ± t_upd(α/2)``, the exact discrete Laplace tail, which
also covers a marginal's noisy cell: integer noise of scale Δ/ε_u has lighter tails) or
``synthetic`` (below the sparse-vector threshold: the answer is within ``T + t_thr(α/4) +
t_q(α/4) + grid`` of the truth, since the test passed only if ``|<w, x> - a| + ν < T + ρ``).
Whichever way an answer goes, it misses only if one of three independent noises exceeds its
tail, so P[miss] <= α/2 + α/4 + α/4 = α for every answer (union bound; not simultaneous over
answers: :meth:`~PrivateMultiplicativeWeights.error_bound` is the simultaneous bound). The
interval is a function of the public parameters and the public ``source``: post-processing.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from dpcurator._validation import check_int, check_positive, check_probability, fail
from dpcurator.accounting import PureEvent
from dpcurator.core.numbers import to_fraction
from dpcurator.errors import BudgetExceededError
from dpcurator.interactive.linear import Weights, counting_query, linear_query
from dpcurator.interactive.pmw_updates import (
    MarginalMeasurement,
    Measurement,
    QueryMeasurement,
    default_threshold,
    marginal_cell,
    pack,
    project,
    step,
    unpack,
)
from dpcurator.mechanisms import AboveThreshold, Laplace
from dpcurator.mechanisms.sparse_vector import AboveThresholdRun
from dpcurator.query.plan.limits import MAX_PUBLIC_GROUPS
from dpcurator.query.schema import Metadata
from dpcurator.query.session import Session
from dpcurator.random import Rng, default_rng
from dpcurator.synth.domain import DEFAULT_MAX_BINS, SynthDomain
from dpcurator.synth.measure import exact_marginals

_OWNER = "PrivateMultiplicativeWeights"

#: Where an answer came from: a noisy measurement (an update round) or the synthetic distribution.
SOURCES = ("update", "synthetic")


@dataclass(frozen=True)
class PmwAnswer:
    """One PMW answer with its (1 - α) interval for the exact answer (module docstring).

    ``source`` is ``update`` (a noisy measurement; the interval is its Laplace CI) or
    ``synthetic`` (the synthetic distribution's answer; the interval is the sparse vector's
    accuracy guarantee: threshold plus noise tails, union bound)."""

    value: float
    ci_low: float
    ci_high: float
    alpha: float
    source: str


class PrivateMultiplicativeWeights:
    """An interactive PMW curator over ``columns`` of a session's table (see the module).

    Args:
        session: the private table (any engine; a pandas frame: ``Session.from_data(frame, ...)``).
        columns: the columns of the domain (default: all but the person column); each needs
            public keys or public bounds (binned into ``max_bins``).
        epsilon: the total ε, charged once at construction.
        max_updates: ``c``, the number of updates (sparse vector rounds) the budget pays for
            (default ``d(d-1)`` for ``d`` columns: two per pair of columns).
        threshold: ``T``, in the units of the answers (rows): a query whose synthetic answer
            is off by clearly less than ``T`` is answered from the synthetic distribution
            (default: ``b·ln(2k/c)``, at least ``b``, with ``b`` the sparse vector's
            query-noise scale and ``k`` = ``queries``: noise alone then sets off about c/4
            updates over k well-answered queries).
        queries: ``k``, how many queries are expected (public; used only for the default T).
        prior_fraction: the share of ε spent on the noisy one-way marginals (the starting
            distribution and the noisy row count).
        svt_fraction: the share of each round's ε spent on the sparse vector test (the rest on
            the noisy answer of the update).
        max_cells: the largest domain accepted (refused before any charge above it).
        passes: sweeps of multiplicative-weights steps over every measured update after each
            update (1: HR10's single step; more: MWEM's replay, post-processing, free).
        max_marginal_cells: an update on a query that counts one cell of a marginal with at
            most this many cells measures the whole marginal at the same ε
            (:mod:`~dpcurator.interactive.pmw_updates`); 0 measures the query alone.

    Raises (all before the charge, free): ParameterError for a bad parameter or column,
    UnsupportedQueryError for a column without a public domain or a domain over ``max_cells``.
    """

    def __init__(
        self,
        session: Session,
        columns: Sequence[str] | None = None,
        *,
        epsilon: object,
        max_updates: int | None = None,
        threshold: object = None,
        queries: int = 1000,
        prior_fraction: object = Fraction(1, 10),
        svt_fraction: object = Fraction(3, 4),
        max_bins: int = DEFAULT_MAX_BINS,
        max_cells: int = MAX_PUBLIC_GROUPS,
        passes: int = 10,
        max_marginal_cells: int = 1024,
    ) -> None:
        if not isinstance(session, Session):
            raise fail(_OWNER, "session", "a Session", session)
        self._configure(
            session.metadata,
            columns,
            epsilon=epsilon,
            max_updates=max_updates,
            threshold=threshold,
            queries=queries,
            prior_fraction=prior_fraction,
            svt_fraction=svt_fraction,
            max_bins=max_bins,
            max_cells=max_cells,
            passes=passes,
            max_marginal_cells=max_marginal_cells,
        )
        self._rng = session.rng
        clique = self.domain.names
        histogram = exact_marginals(
            session,
            self.domain,
            [clique],
            PureEvent(self.epsilon),
            description=f"private multiplicative weights over {list(clique)}",
        )[clique]
        self._histogram = histogram.reshape(-1).astype(np.float64)
        self.noisy_size, self._distribution = self._start(histogram)
        self._run: AboveThresholdRun | None = None
        self._measured: list[Measurement] = []
        self.updates_used = 0

    def _configure(
        self,
        metadata: Metadata,
        columns: Sequence[str] | None,
        *,
        epsilon: object,
        max_updates: int | None,
        threshold: object,
        queries: int,
        prior_fraction: object,
        svt_fraction: object,
        max_bins: int,
        max_cells: int,
        passes: int,
        max_marginal_cells: int,
    ) -> None:
        """Check every public parameter and build every mechanism (a noise scale over 2^52 is
        refused here): before any charge, from public inputs only."""
        eps = to_fraction(check_positive(_OWNER, "epsilon", epsilon))
        k = check_int(_OWNER, "queries", queries, minimum=1)
        self.prior_fraction = to_fraction(
            check_probability(
                _OWNER, "prior_fraction", prior_fraction, open_low=True, open_high=True
            )
        )
        self.svt_fraction = to_fraction(
            check_probability(_OWNER, "svt_fraction", svt_fraction, open_low=True, open_high=True)
        )
        self.max_bins = max_bins
        self.max_cells = check_int(_OWNER, "max_cells", max_cells, minimum=1)
        self.passes = check_int(_OWNER, "passes", passes, minimum=1)
        self.max_marginal_cells = check_int(
            _OWNER, "max_marginal_cells", max_marginal_cells, minimum=0
        )
        self.domain = SynthDomain.from_metadata(metadata, columns, max_bins=max_bins)
        self.domain.check_marginal(self.domain.names, self.max_cells)
        self.cells = self.domain.cells(self.domain.names)
        self.sensitivity = metadata.unit.count_l1(self.cells)
        d = len(self.domain.columns)  # default: two updates per pair of columns
        chosen = max(d * (d - 1), 2) if max_updates is None else max_updates
        updates = check_int(_OWNER, "max_updates", chosen, minimum=1)
        self.epsilon = eps
        self.max_updates = updates
        self.prior_epsilon = eps * self.prior_fraction
        round_epsilon = (eps - self.prior_epsilon) / updates
        self.svt_epsilon = round_epsilon * self.svt_fraction
        self.update_epsilon = round_epsilon - self.svt_epsilon
        self._prior = Laplace.for_epsilon(
            self.prior_epsilon, self.sensitivity * len(self.domain.columns)
        )
        self.threshold = (
            default_threshold(self.svt_epsilon, self.sensitivity, k, updates)
            if threshold is None
            else float(check_positive(_OWNER, "threshold", threshold))
        )
        self._svt = AboveThreshold(self.svt_epsilon, self.sensitivity, self.threshold)
        self._update = Laplace.for_epsilon_floats(self.update_epsilon, self.sensitivity)
        self._marginal = Laplace.for_epsilon(self.update_epsilon, self.sensitivity)

    # -- persistence (a service keeps the curator between requests) ------------------------------

    def parameters(self) -> dict[str, object]:
        """The public parameters, JSON-ready (exact fractions as text): with the same metadata,
        :meth:`restore` rebuilds the same domain and mechanisms from them."""
        return {
            "columns": list(self.domain.names),
            "epsilon": str(self.epsilon),
            "max_updates": self.max_updates,
            "threshold": self.threshold,
            "prior_fraction": str(self.prior_fraction),
            "svt_fraction": str(self.svt_fraction),
            "max_bins": self.max_bins,
            "max_cells": self.max_cells,
            "passes": self.passes,
            "max_marginal_cells": self.max_marginal_cells,
        }

    def to_bytes(self) -> bytes:
        """The curator's state: the exact histogram, the noisy size, the synthetic distribution,
        the measured updates and the open sparse-vector run's noisy threshold. PRIVATE (the
        histogram and the threshold noise are secret): store it where the data may be stored."""
        header = {
            "noisy_size": self.noisy_size,
            "updates_used": self.updates_used,
            # the open run's noisy threshold in grid units (a Python int, unbounded)
            "threshold_units": None if self._run is None else self._run._threshold,
        }
        arrays: dict[str, Any] = {"histogram": self._histogram, **pack(self._measured)}
        buffer = io.BytesIO()
        np.savez(
            buffer,
            header=np.array(json.dumps(header)),
            distribution=self._distribution,
            **arrays,
        )
        return buffer.getvalue()

    @classmethod
    def restore(
        cls,
        metadata: Metadata,
        parameters: Mapping[str, object],
        state: bytes,
        rng: Rng | None = None,
    ) -> PrivateMultiplicativeWeights:
        """The curator saved by :meth:`parameters` and :meth:`to_bytes` (nothing is charged:
        the budget was paid when it was built); ``rng`` draws its further noise."""
        made = cls.__new__(cls)
        made._configure(
            metadata,
            cast("list[str]", parameters["columns"]),
            epsilon=Fraction(cast("str", parameters["epsilon"])),
            max_updates=cast("int", parameters["max_updates"]),
            threshold=parameters["threshold"],
            queries=1,  # unused: the threshold is given
            prior_fraction=Fraction(cast("str", parameters["prior_fraction"])),
            svt_fraction=Fraction(cast("str", parameters["svt_fraction"])),
            max_bins=cast("int", parameters["max_bins"]),
            max_cells=cast("int", parameters["max_cells"]),
            passes=cast("int", parameters["passes"]),
            # a mode saved before marginal updates existed measured queries alone
            max_marginal_cells=cast("int", parameters.get("max_marginal_cells", 0)),
        )
        made._rng = rng or default_rng()
        with np.load(io.BytesIO(state), allow_pickle=False) as saved:
            header = json.loads(str(saved["header"]))
            made._histogram = saved["histogram"].astype(np.float64)
            made._distribution = saved["distribution"].astype(np.float64)
            made._measured = unpack(saved, made._shape)
        made.noisy_size = float(header["noisy_size"])
        made.updates_used = int(header["updates_used"])
        units = header["threshold_units"]
        made._run = None if units is None else AboveThresholdRun(made._svt, made._rng, int(units))
        return made

    # ------------------------------------------------------------------------------------------

    @property
    def updates_left(self) -> int:
        """Updates the budget still pays for (public: a function of released outcomes)."""
        return self.max_updates - self.updates_used

    @property
    def synthetic(self) -> npt.NDArray[np.float64]:
        """The public synthetic distribution over the domain (domain shape, sums to 1)."""
        return self._distribution.reshape(self.domain.shape(self.domain.names)).copy()

    def count(self, where: Mapping[str, object] | None = None) -> float:
        """Answer ``COUNT(*) WHERE`` every ``column IN values`` of ``where`` (see
        :func:`~dpcurator.interactive.linear.counting_query`)."""
        return self._answer(counting_query(self.domain, where or {}))

    def answer_linear(self, weights: npt.ArrayLike) -> float:
        """Answer the linear query ``sum(weights * histogram)`` (weights in [0, 1] per cell)."""
        return self._answer(linear_query(self.domain, weights))

    def ask(
        self,
        where: Mapping[str, object] | None = None,
        *,
        weights: npt.ArrayLike | None = None,
        alpha: object = 0.05,
    ) -> PmwAnswer:
        """Answer a counting query (``where``, as :meth:`count`) or a linear one (``weights``,
        as :meth:`answer_linear`) with its (1 - ``alpha``) interval and source."""
        level = check_probability(f"{_OWNER}.ask", "alpha", alpha, open_low=True, open_high=True)
        if weights is not None and where is not None:
            raise fail(f"{_OWNER}.ask", "where", "None when weights are given", where)
        query = (
            counting_query(self.domain, where or {})
            if weights is None
            else linear_query(self.domain, weights)
        )
        before = self.updates_used
        value = self._answer(query)
        return self.interval(value, SOURCES[self.updates_used == before], level)

    def interval(self, value: float, source: str, alpha: object = 0.05) -> PmwAnswer:
        """The (1 - ``alpha``) interval of an answer ``value`` from ``source`` (``update`` or
        ``synthetic``): public parameters only (module docstring, "Per-answer intervals")."""
        owner = f"{_OWNER}.interval"
        level = to_fraction(check_probability(owner, "alpha", alpha, open_low=True, open_high=True))
        if source not in SOURCES:
            raise fail(owner, "source", f"one of {', '.join(SOURCES)}", source)
        if source == "update":
            rounding = float(self._update.scale) * 2.0**-30  # half the update's grid step at most
            half = self._update.ci_halfwidth_floats(level / 2) + rounding
        else:
            svt = self._svt
            step = math.ldexp(1.0, svt.grid)
            threshold_tail = Laplace(svt.threshold_scale).ci_halfwidth(level / 4) * step
            query_tail = Laplace(svt.query_scale).ci_halfwidth(level / 4) * step
            half = self.threshold + threshold_tail + query_tail + step
        return PmwAnswer(value, value - half, value + half, float(level), source)

    def synthetic_answer(self, weights: npt.ArrayLike) -> float:
        """The linear query's answer on the public synthetic distribution only (post-processing:
        free, touches no data; no accuracy guarantee: the sparse vector test is not run)."""
        return self.noisy_size * float(linear_query(self.domain, weights) @ self._distribution)

    def error_bound(self, queries: int, beta: object = 0.05) -> float:
        """A bound that, with probability at least 1 - ``beta``, every one of the first
        ``queries`` answers is within of the truth (module docstring, "Accuracy")."""
        k = check_int(f"{_OWNER}.error_bound", "queries", queries, minimum=1)
        level = to_fraction(
            check_probability(f"{_OWNER}.error_bound", "beta", beta, open_low=True, open_high=True)
        )
        svt, c = self._svt, self.max_updates
        step = math.ldexp(1.0, svt.grid)
        threshold_tail = Laplace(svt.threshold_scale).ci_halfwidth(level / (3 * c)) * step
        query_tail = Laplace(svt.query_scale).ci_halfwidth(level / (3 * k)) * step
        # rounding the answer and the threshold to the grid moves each by at most step / 2
        synthetic = self.threshold + threshold_tail + query_tail + step
        rounding = float(self._update.scale) * 2.0**-30  # at most half the update's grid step
        updated = self._update.ci_halfwidth_floats(level / (3 * c)) + rounding
        return max(synthetic, updated)

    # ------------------------------------------------------------------------------------------

    def _start(self, histogram: npt.NDArray[np.int64]) -> tuple[float, npt.NDArray[np.float64]]:
        """The noisy row count and the starting distribution, from one Laplace release of the
        one-way marginals of ``histogram`` (module docstring)."""
        axes = range(histogram.ndim)
        marginals = [histogram.sum(axis=tuple(a for a in axes if a != j)) for j in axes]
        noisy = self._prior.release_integers(np.concatenate(marginals), self._rng)
        parts = np.split(noisy, np.cumsum([m.size for m in marginals])[:-1])
        size = max(float(np.mean([int(part.sum()) for part in parts])), 1.0)
        distribution = np.ones(1, dtype=np.float64)
        for part in parts:
            smoothed = np.maximum(part, 0).astype(np.float64) + 1.0
            distribution = np.multiply.outer(distribution, smoothed / smoothed.sum())
        return size, distribution.reshape(-1)

    def _answer(self, weights: Weights) -> float:
        if self.updates_used >= self.max_updates:
            raise BudgetExceededError(
                "one more update", "0 updates", what=f"update budget ({self.max_updates} updates)"
            )
        synthetic = self.synthetic_answer(weights)
        exact = float(weights @ self._histogram)
        if self._run is None:
            self._run = self._svt.start(self._rng)
        if not self._run.test(abs(exact - synthetic)):
            return synthetic
        self._run = None
        self.updates_used += 1
        noisy, measured = self._measure(weights)
        self._measured.append(measured)
        for _ in range(self.passes):
            for each in self._measured:
                step(self._distribution, self._shape, each, self.noisy_size)
        return noisy

    @property
    def _shape(self) -> tuple[int, ...]:
        return self.domain.shape(self.domain.names)

    def _measure(self, weights: Weights) -> tuple[float, Measurement]:
        """The noisy answer of an update and what it measured: the query's whole marginal when
        it counts one cell of a small one (public: from the query), else the query alone."""
        found = marginal_cell(weights, self._shape, self.max_marginal_cells)
        if found is None:
            noisy = float(
                self._update.release_floats([float(weights @ self._histogram)], self._rng)[0]
            )
            support = np.flatnonzero(weights)
            return noisy, QueryMeasurement(support, weights[support], noisy)
        axes, cell = found
        exact = project(self._histogram, self._shape, axes).round().astype(np.int64)
        released = self._marginal.release_integers(exact.reshape(-1), self._rng)
        noisy_marginal = released.astype(np.float64).reshape(exact.shape)
        return float(released[cell]), MarginalMeasurement(axes, noisy_marginal)
