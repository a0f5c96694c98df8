"""The library's Session: one verb per kind of release, on one table and one budget.

:class:`Session` is the query session (:class:`dpcurator.query.session.Session`: ``sql``,
``release``, ``fit``, ``dp_bounds``, ...) with a verb for every other release kind::

    s.synthesize("mst", columns=[...], epsilon=1.0, delta=1e-6)    # synthetic data
    s.kmeans(["age", "income"], k=3, epsilon=1.0)                  # mining
    s.pca(...), s.naive_bayes(...), s.decision_tree(...)
    s.chi2(["sex", "smoker"], epsilon=0.5)                        # hypothesis tests
    s.proportions_ztest(...), s.ttest(...), s.anova(...), s.ks(...)
    s.pmw(["sex", "age"], epsilon=1.0, max_updates=20, threshold=50)   # interactive

Every verb takes the same budget arguments, ``epsilon`` (with ``delta``) or ``rho``, converted
exactly to the algorithm's own guarantee or refused (free, naming the parameter) when that is not
sound (:mod:`dpcurator.api.budget`); every refusal is decided from the public metadata and the
parameters before anything is charged; the charge goes to the session's filter before the engine
reads the data; and every verb returns a :class:`~dpcurator.api.result.Result` (``values``,
``intervals``, ``cost``, ``summary()``, ``to_pandas()``), the shape of ``s.sql``'s
:class:`~dpcurator.query.release.core.Release`.

Streams (:mod:`dpcurator.streams`) are not verbs: a stream is a sequence of events that arrive
after the release starts, not a table a session holds, so it has its own objects
(docs/streams.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TypeVar

from dpcurator._validation import fail
from dpcurator.accounting.events import PrivacyEvent
from dpcurator.api import kinds, means
from dpcurator.api.budget import EITHER, PURE, ZCDP_ONLY, Charging, Cost, resolve
from dpcurator.api.result import Result
from dpcurator.interactive.pmw import PrivateMultiplicativeWeights
from dpcurator.mining import ID3, PCA, GaussianNB, KMeans
from dpcurator.query.session import Session as QuerySession
from dpcurator.synth.domain import DEFAULT_MAX_BINS

_T = TypeVar("_T")
Budgeted = tuple[object, object, object]


class Session(QuerySession):
    """A private table, its public metadata and a budget filter, with one verb per release kind.

    Constructed as :class:`dpcurator.query.session.Session` (``Session.from_data(source,
    metadata=..., budget=...)``); see :mod:`dpcurator.api.session` for the verbs' contract.
    """

    def synthesize(
        self,
        method: str = "mst",
        *,
        columns: Sequence[str] | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        rows: int | None = None,
        workload: Sequence[Sequence[str]] | None = None,
        max_bins: int = DEFAULT_MAX_BINS,
    ) -> Result:
        """Synthetic records of ``columns`` (default: all but the person column) by ``method``:
        ``"mst"`` or ``"aim"`` (ρ-zCDP: give ``rho``, or ``epsilon`` and ``delta`` > 0) or
        ``"mwem"`` (pure ε-DP: ``epsilon``). ``workload``: the marginals AIM and MWEM aim at
        (default: every pair). ``rows``: how many records (default: the noisy total).
        ``to_pandas()`` gives the records; ``detail`` the :class:`SyntheticData`."""
        owner = "Session.synthesize"
        if method not in kinds.SYNTHESIZERS:
            raise fail(owner, "method", f"one of {sorted(kinds.SYNTHESIZERS)}", method)
        native = PURE if kinds.SYNTHESIZERS[method] == "pure" else ZCDP_ONLY
        options = {"columns": columns, "rows": rows, "workload": workload, "max_bins": max_bins}
        data, events = self._charged(
            f"{owner} with method {method!r}",
            native,
            (epsilon, delta, rho),
            lambda session, cost: kinds.synthetic(session, cost, method, options),
        )
        return kinds.synthetic_result(data, events)

    def kmeans(
        self,
        columns: Sequence[str],
        k: int,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        iterations: int | str | None = None,
        rows: int | None = None,
    ) -> Result:
        """k-means of numeric ``columns`` (public bounds) by noisy Lloyd iterations
        (:class:`~dpcurator.mining.KMeans`, pure ε-DP); ``values["cluster_centers"]``."""
        model, events = self._charged(
            "Session.kmeans",
            PURE,
            (epsilon, delta, rho),
            lambda session, cost: KMeans(k, cost.epsilon, iterations=iterations, rows=rows).fit(
                session, columns=columns
            ),
        )
        return kinds.kmeans_result(model, columns, events)

    def pca(
        self,
        columns: Sequence[str],
        n_components: int,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
    ) -> Result:
        """Principal components of numeric ``columns`` (public bounds) from a noisy
        second-moment matrix (:class:`~dpcurator.mining.PCA`, pure ε-DP)."""
        model, events = self._charged(
            "Session.pca",
            PURE,
            (epsilon, delta, rho),
            lambda session, cost: PCA(n_components, cost.epsilon).fit(session, columns=columns),
        )
        return kinds.pca_result(model, columns, events)

    def naive_bayes(
        self,
        columns: Sequence[str],
        label: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
    ) -> Result:
        """Gaussian naive Bayes of ``label`` (public keys) on numeric ``columns``
        (:class:`~dpcurator.mining.GaussianNB`, pure ε-DP); ``detail.predict`` classifies."""
        model, events = self._charged(
            "Session.naive_bayes",
            PURE,
            (epsilon, delta, rho),
            lambda session, cost: GaussianNB(cost.epsilon).fit(
                session, columns=columns, label=label
            ),
        )
        return kinds.naive_bayes_result(model, columns, events)

    def decision_tree(
        self,
        columns: Sequence[str],
        label: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        max_depth: int = 3,
    ) -> Result:
        """An ID3 decision tree of ``label`` on categorical ``columns`` (public keys) from
        noisy counts (:class:`~dpcurator.mining.ID3`, pure ε-DP); ``values["rules"]``."""
        model, events = self._charged(
            "Session.decision_tree",
            PURE,
            (epsilon, delta, rho),
            lambda session, cost: ID3(cost.epsilon, max_depth=max_depth).fit(
                session, columns=columns, label=label
            ),
        )
        return kinds.tree_result(model, columns, events)

    def chi2(
        self,
        columns: Sequence[str],
        *,
        probabilities: Sequence[float] | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        simulations: int = 999,
    ) -> Result:
        """A chi-square test on the table: independence of two ``columns``, or with
        ``probabilities`` (one per public category of one column) goodness of fit; ε-DP
        (``epsilon``) or ρ-zCDP (``rho``). ``values``: ``statistic``, ``p_value`` and the noisy
        counts; ``detail``: the :class:`HypothesisTestResult`."""
        (result, _), events = self._charged(
            "Session.chi2",
            EITHER,
            (epsilon, delta, rho),
            lambda session, cost: kinds.chi_square(
                session, cost, columns, probabilities, simulations
            ),
        )
        return kinds.hypothesis_result(result, events)

    def proportions_ztest(
        self,
        outcome: str,
        by: str,
        *,
        groups: Sequence[object] | None = None,
        alternative: str = "two-sided",
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        simulations: int = 999,
    ) -> Result:
        """A two-proportion z-test: does ``outcome`` (0/1 or bool) have the same rate in the two
        ``groups`` of column ``by`` (default: its two public keys)? ε-DP or ρ-zCDP, as
        :meth:`chi2`; ``values["estimate"]`` is the difference of the noisy rates."""
        result, events = self._charged(
            "Session.proportions_ztest",
            EITHER,
            (epsilon, delta, rho),
            lambda session, cost: kinds.two_proportions(
                session, cost, outcome, by, groups, alternative, simulations
            ),
        )
        return kinds.hypothesis_result(result, events)

    def ttest(
        self,
        column: str,
        *,
        mean: float | None = None,
        by: str | None = None,
        groups: Sequence[object] | None = None,
        paired: str | None = None,
        alternative: str = "two-sided",
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        simulations: int = 999,
    ) -> Result:
        """A t-test of a numeric column with public bounds: one-sample of H0: mean = ``mean``,
        with ``by`` (public keys) Welch's two-sample test of the two ``groups`` (default: its
        two keys), or with ``paired`` (a second bounded column) the paired test: one-sample of
        each row's ``column - paired`` against ``mean`` (default 0), its bounds from the two
        columns'. ε-DP or ρ-zCDP; ``values["estimate"]``: the noisy mean or difference."""
        result, events = self._charged(
            "Session.ttest",
            EITHER,
            (epsilon, delta, rho),
            lambda session, cost: means.t_test(
                session,
                cost,
                column,
                mean,
                None if by is None else (by, groups),
                alternative,
                simulations,
                paired,
            ),
        )
        return kinds.hypothesis_result(result, events)

    def ks(
        self,
        column: str,
        by: str,
        *,
        cuts: Sequence[float],
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        simulations: int = 999,
    ) -> Result:
        """A binned two-sample Kolmogorov–Smirnov test: has ``column`` one distribution in the
        two public keys of ``by``? Rows are counted in the bins of the public ``cuts`` (as SQL
        ``KS(x, g, c1, ...)``). ε-DP or ρ-zCDP; ``values``: ``statistic``, ``p_value`` and each
        group's noisy bin counts."""
        result, events = self._charged(
            "Session.ks",
            EITHER,
            (epsilon, delta, rho),
            lambda session, cost: kinds.kolmogorov_smirnov(
                session, cost, column, by, cuts, simulations
            ),
        )
        return kinds.hypothesis_result(result, events)

    def anova(
        self,
        column: str,
        by: str,
        *,
        groups: Sequence[object] | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        simulations: int = 999,
    ) -> Result:
        """One-way ANOVA: equal means of ``column`` (numeric, public bounds) in the ``groups``
        of ``by`` (default: all its public keys)? ε-DP or ρ-zCDP."""
        result, events = self._charged(
            "Session.anova",
            EITHER,
            (epsilon, delta, rho),
            lambda session, cost: means.anova(session, cost, column, (by, groups), simulations),
        )
        return kinds.hypothesis_result(result, events)

    def pmw(
        self,
        columns: Sequence[str] | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        max_updates: int,
        threshold: float,
        prior_fraction: float | Fraction = Fraction(1, 10),
        max_bins: int = DEFAULT_MAX_BINS,
    ) -> Result:
        """An interactive private-multiplicative-weights curator over ``columns`` (pure ε-DP,
        the whole ε charged now): ``detail`` is the
        :class:`~dpcurator.interactive.pmw.PrivateMultiplicativeWeights`; ask it counting
        queries with ``detail.ask({"sex": "F"})`` (no further charge)."""
        curator, events = self._charged(
            "Session.pmw",
            PURE,
            (epsilon, delta, rho),
            lambda session, cost: PrivateMultiplicativeWeights(
                session,
                columns,
                epsilon=cost.epsilon,
                max_updates=max_updates,
                threshold=threshold,
                prior_fraction=prior_fraction,
                max_bins=max_bins,
            ),
        )
        return kinds.pmw_result(curator, events)

    def _charged(
        self,
        owner: str,
        native: str,
        budget: Budgeted,
        run: Callable[[QuerySession, Cost], _T],
    ) -> tuple[_T, list[PrivacyEvent]]:
        """Resolve the budget arguments (free refusals), then run the algorithm on this table
        with a filter that forwards every reservation to this session's filter (converted by
        the resolved cost); the algorithm's output and the events charged."""
        epsilon, delta, rho = budget
        cost = resolve(owner, self._filter, native, epsilon=epsilon, delta=delta, rho=rho)
        charging = Charging(self._filter, cost.charge)
        inner = QuerySession(
            self._backend,
            self.metadata,
            budget_filter=charging,
            rng=self.rng,
            plan_cache=self._plans,
        )
        return run(inner, cost), charging.charged
