"""Data mining on noisy aggregates, SuLQ style (Blum, Dwork, McSherry & Nissim 2005; issue 16,
part 2): every algorithm touches the data only through noisy counts and sums released by
:mod:`dpcurator.mechanisms`, states its exact ε cost (``epsilon_spent_``) and iteration count
(``n_iter_``), and follows scikit-learn's ``fit``/``predict``/``transform`` shape.

* :class:`KMeans` — noisy Lloyd iterations (per-cluster noisy counts and sums).
* :class:`PCA` — eigenvectors of a noisy second-moment matrix (Analyze Gauss template, Dwork,
  Talwar, Thakurta & Zhang 2014, with Laplace noise).
* :class:`GaussianNB` — naive Bayes from noisy per-class counts, sums and sums of squares.
* :class:`ID3` — decision tree from noisy contingency tables (Friedman & Schuster 2010).

Every algorithm fits on a session table (``fit(session, columns=[...])``, GaussianNB and ID3
with ``label=``): they touch the data only through :meth:`Session.release` of builder queries, so
they run on every engine, are bounded per person by the metadata and charged to the session's
filter (one reservation per release; the total is checked against the remaining budget first,
free). Fitting an array is the same fit on a private in-memory session built from the public
bounds (row-level privacy; values clamped, NaN to the midpoint, never refused). ID3 splits on
categorical columns (public keys); its array fit takes integer codes.
"""

from __future__ import annotations

from dpcurator.mining.id3 import ID3
from dpcurator.mining.kmeans import KMeans
from dpcurator.mining.naive_bayes import GaussianNB
from dpcurator.mining.pca import PCA

__all__ = ["ID3", "PCA", "GaussianNB", "KMeans"]
