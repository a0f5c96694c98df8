"""One library API for every release kind: :class:`Session` has a verb per kind (``sql``,
``fit``, ``synthesize``, ``kmeans``, ``pca``, ``naive_bayes``, ``decision_tree``, ``chi2``,
``proportions_ztest``, ``ttest``, ``anova``, ``pmw``), the same budget arguments on each
(:mod:`dpcurator.api.budget`) and one release shape (:class:`Result`, like the SQL
:class:`~dpcurator.query.release.core.Release`). docs/library.md has the table of verbs."""

from __future__ import annotations

from dpcurator.api.result import Result
from dpcurator.api.session import Session

__all__ = ["Result", "Session"]
