"""A Python client of the curator's HTTP API (what the CLI uses).

Example (against a running ``dpcurator serve --demo``)::

    client = CuratorClient("http://127.0.0.1:8000", token)
    client.query("demo", "SELECT COUNT(*) AS n FROM people", epsilon=0.5)["release"]

Problem documents come back as the library's typed errors: BudgetExceededError (409
budget-exceeded), AuthError (401/403/429), UnsupportedQueryError / ParameterError (422),
NotFoundError (404), ConflictError (409), DPError otherwise.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcurator.errors import (
    AuthError,
    BudgetExceededError,
    DPError,
    ParameterError,
    UnsupportedQueryError,
)
from dpcurator.service.client_jobs import JobCalls
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.http_transport import Response, Transport

if TYPE_CHECKING:
    import pandas as pd

    from dpcurator.random import Rng


def _error(response: Response) -> DPError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    detail = str(problem.get("detail") or response.text or response.reason_phrase)
    slug = str(problem.get("type", "")).rsplit(":", 1)[-1]
    if slug == "budget-exceeded":
        error = BudgetExceededError(problem.get("requested"), problem.get("remaining"))
        error.args = (detail,)
        return error
    by_status: dict[int, type[DPError]] = {
        401: AuthError,
        403: AuthError,
        429: AuthError,
        404: NotFoundError,
        409: ConflictError,
    }
    if slug == "unsupported-query":
        return UnsupportedQueryError(detail)
    if response.status_code in (400, 413, 422):
        return ParameterError(detail)
    return by_status.get(response.status_code, DPError)(detail)


class CuratorClient(JobCalls):
    """Talk to a dpcurator server with an API token.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        token: an owner or analyst token (None: anonymous, for public synthetic releases).
        timeout: seconds per request.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self._http = Transport(
            url.rstrip("/"),
            headers={} if token is None else {"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> CuratorClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _error(self, response: Response) -> DPError:
        return _error(response)

    def _call(
        self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        response = self._http.request(method, path, json=json, headers=headers)
        if response.status_code >= 400:
            raise _error(response)
        return None if response.status_code == 204 else response.json()

    # -- everyone ---------------------------------------------------------------------------

    def me(self) -> dict[str, Any]:
        """Who the token belongs to."""
        result: dict[str, Any] = self._call("GET", "/v1/me")
        return result

    def datasets(self) -> list[dict[str, Any]]:
        """The datasets this token may query."""
        result: list[dict[str, Any]] = self._call("GET", "/v1/datasets")
        return result

    def dataset(self, dataset_id: str) -> dict[str, Any]:
        """One dataset: public schema and budget."""
        result: dict[str, Any] = self._call("GET", f"/v1/datasets/{dataset_id}")
        return result

    def budget(self, dataset_id: str) -> dict[str, Any]:
        """Total, spent and remaining budget on a dataset."""
        result: dict[str, Any] = self._call("GET", f"/v1/datasets/{dataset_id}/budget")
        return result

    def query(
        self,
        dataset_id: str,
        sql: str,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        idempotency_key: str | None = None,
        accuracy: dict[str, float | str] | None = None,
        noise: str | None = None,
        rho: float | None = None,
        clipping: float | None = None,
    ) -> dict[str, Any]:
        """Run a query at ``epsilon``, at a zCDP cost ``rho``, or at the smallest cost meeting
        ``accuracy`` (CI half-width per output), with the ``noise`` family (``laplace`` |
        ``gaussian``; default: the server's choice); the answer has ``release``, ``cost`` and
        ``remaining``."""
        headers = None if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        body = _query_body(sql, epsilon=epsilon, delta=delta, accuracy=accuracy, noise=noise,
                           rho=rho, clipping=clipping)  # fmt: skip
        result: dict[str, Any] = self._call(
            "POST",
            f"/v1/datasets/{dataset_id}/queries",
            json=body,
            headers=headers,
        )
        return result

    def estimate(
        self,
        dataset_id: str,
        sql: str,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        accuracy: dict[str, float | str] | None = None,
        noise: str | None = None,
        rho: float | None = None,
        clipping: float | None = None,
    ) -> dict[str, Any]:
        """The cost and expected CI half-widths of a query at ``epsilon`` or ``rho``, or of the
        smallest cost meeting ``accuracy`` (CI half-width per output), with the ``noise``
        family; nothing runs or is charged."""
        body = _query_body(sql, epsilon=epsilon, delta=delta, accuracy=accuracy, noise=noise,
                           rho=rho, clipping=clipping)  # fmt: skip
        result: dict[str, Any] = self._call(
            "POST", f"/v1/datasets/{dataset_id}/queries:estimate", json=body
        )
        return result

    def fit(
        self,
        dataset_id: str,
        model: str,
        response: str,
        predictors: list[str],
        *,
        epsilon: float,
        delta: float = 0.0,
        alpha: float = 0.05,
        idempotency_key: str | None = None,
        estimate: bool = False,
        background: bool = False,
        wait: bool = True,
        progress: Callable[[dict[str, Any]], None] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Fit ``model`` (``linear``: δ > 0; ``logistic``) of ``response`` on ``predictors``;
        the answer's ``fit`` holds one row per term with its coefficient and (1-α) CI.
        ``options``: ``fit_intercept``, ``coef_bound``, ``method``, ``blocks``. With
        ``estimate=True``: the cost and whether it fits, nothing charged (``POST
        .../fits:estimate``).

        A long fit runs on the server as a background job (202): the client polls it and
        returns the same answer (:meth:`wait_job`). ``background``: ask for a job even for a
        short fit; ``wait=False``: return the job instead of waiting; ``progress``: called with
        the job at each poll."""
        body: dict[str, Any] = {
            "model": model,
            "response": response,
            "predictors": list(predictors),
            "epsilon": epsilon,
            "delta": delta,
            "alpha": alpha,
            **options,
        }
        if estimate:
            path = f"/v1/datasets/{dataset_id}/fits:estimate"
            result: dict[str, Any] = self._call("POST", path, json=body)
            return result
        path = f"/v1/datasets/{dataset_id}/fits"
        return self._submit(
            path, body, key=idempotency_key, background=background, wait=wait, progress=progress
        )

    def sparse_vector(
        self,
        dataset_id: str,
        queries: list[str],
        *,
        threshold: float,
        epsilon: float,
        c: int = 1,
        numeric: bool = False,
        idempotency_key: str | None = None,
        background: bool = False,
        wait: bool = True,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Which ``queries`` exceed ``threshold`` (at most ``c`` positives, ε charged once); the
        answer's ``release`` holds one flag per query. ``background``, ``wait``, ``progress``:
        as for :meth:`fit` (a long list runs as a job)."""
        body = {"queries": list(queries), "threshold": threshold, "epsilon": epsilon, "c": c}
        if numeric:
            body["numeric"] = True
        path = f"/v1/datasets/{dataset_id}/sparse-vector"
        return self._submit(
            path, body, key=idempotency_key, background=background, wait=wait, progress=progress
        )

    def history(self, dataset_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """This token's own query history on a dataset, newest first."""
        result: list[dict[str, Any]] = self._call(
            "GET", f"/v1/datasets/{dataset_id}/queries?limit={limit}"
        )
        return result

    def releases(self, dataset_id: str) -> list[dict[str, Any]]:
        """Published releases of a dataset."""
        result: list[dict[str, Any]] = self._call("GET", f"/v1/datasets/{dataset_id}/releases")
        return result

    def release(self, release_id: str) -> dict[str, Any]:
        """One published release (free)."""
        result: dict[str, Any] = self._call("GET", f"/v1/releases/{release_id}")
        return result

    def revoke_token(self, token_id: str) -> None:
        """Revoke a token (owners: any; analysts: their own)."""
        self._call("DELETE", f"/v1/tokens/{token_id}")

    # -- owners -----------------------------------------------------------------------------

    def register_dataset(
        self,
        dataset_id: str,
        *,
        path: str,
        metadata: dict[str, Any],
        cap_epsilon: float,
        cap_delta: float = 0.0,
        replay_enabled: bool = False,
    ) -> dict[str, Any]:
        """Register a data file with its public metadata and global cap."""
        body = {
            "id": dataset_id,
            "source": {"path": path},
            "metadata": metadata,
            "cap_epsilon": cap_epsilon,
            "cap_delta": cap_delta,
            "replay_enabled": replay_enabled,
        }
        result: dict[str, Any] = self._call("POST", "/v1/datasets", json=body)
        return result

    def set_replay(self, dataset_id: str, enabled: bool) -> dict[str, Any]:
        """Allow (or stop) answering repeated questions from history at no cost."""
        result: dict[str, Any] = self._call(
            "PATCH", f"/v1/datasets/{dataset_id}", json={"replay_enabled": enabled}
        )
        return result

    def analysts(self) -> list[dict[str, Any]]:
        """Every analyst (id, name, role, created_at)."""
        result: list[dict[str, Any]] = self._call("GET", "/v1/analysts")
        return result

    def create_analyst(self, name: str, *, expires_in: float | None = None) -> dict[str, Any]:
        """Create an analyst; the response holds its token (shown once)."""
        body: dict[str, Any] = {"name": name}
        if expires_in is not None:
            body["expires_in"] = expires_in
        result: dict[str, Any] = self._call("POST", "/v1/analysts", json=body)
        return result

    def set_budget(
        self, analyst_id: str, dataset_id: str, *, epsilon: float, delta: float = 0.0
    ) -> dict[str, Any]:
        """Set an analyst's total budget on a dataset."""
        result: dict[str, Any] = self._call(
            "PUT",
            f"/v1/analysts/{analyst_id}/grants/{dataset_id}",
            json={"epsilon": epsilon, "delta": delta},
        )
        return result

    def publish(self, dataset_id: str, name: str, queries: list[dict[str, Any]]) -> dict[str, Any]:
        """Run a batch once and publish it (``queries``: dicts with sql, epsilon, delta)."""
        result: dict[str, Any] = self._call(
            "POST", f"/v1/datasets/{dataset_id}/releases", json={"name": name, "queries": queries}
        )
        return result

    def audit(self, *, limit: int = 200) -> list[dict[str, Any]]:
        """The audit log, newest first."""
        result: list[dict[str, Any]] = self._call("GET", f"/v1/audit?limit={limit}")
        return result

    def ledger(self, *, limit: int = 200) -> list[dict[str, Any]]:
        """Every ledger entry, newest first."""
        result: list[dict[str, Any]] = self._call("GET", f"/v1/ledger?limit={limit}")
        return result

    def open_pmw(
        self,
        dataset_id: str,
        *,
        epsilon: float,
        threshold: float | None = None,
        max_updates: int | None = None,
        queries: int = 1000,
        columns: list[str] | None = None,
        when_exhausted: str = "refuse",
    ) -> dict[str, Any]:
        """Open a private multiplicative weights mode on a dataset (owners; its whole ε is
        charged to the dataset's cap now); the answer has its ``id``. ``threshold`` and
        ``max_updates`` left out are set from public inputs (``queries``: how many to expect)."""
        body: dict[str, Any] = {"epsilon": epsilon, "threshold": threshold, "queries": queries}
        body.update(max_updates=max_updates, columns=columns, when_exhausted=when_exhausted)
        result: dict[str, Any] = self._call("POST", f"/v1/datasets/{dataset_id}/pmw", json=body)
        return result

    def pmw(self, mode_id: str) -> dict[str, Any]:
        """A PMW mode's public parameters and counters."""
        result: dict[str, Any] = self._call("GET", f"/v1/pmw/{mode_id}")
        return result

    def ask_pmw(
        self, mode_id: str, sql: str | None = None, *, where: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One counting query to a PMW mode (``sql`` or ``where``; free for the caller): the
        answer has ``value``, ``source`` and the mode's counters."""
        body = {"sql": sql} if where is None else {"where": where}
        result: dict[str, Any] = self._call("POST", f"/v1/pmw/{mode_id}/queries", json=body)
        return result

    def answer_survey(
        self, survey_id: str, answers: list[str], *, rng: Rng | None = None
    ) -> dict[str, Any]:
        """Randomise ``answers`` HERE (:func:`randomize_answers`) and send only the reports."""
        survey: dict[str, Any] = self._call("GET", f"/v1/surveys/{survey_id}")
        reports = randomize_answers(
            answers, survey["categories"], Fraction(survey["epsilon_exact"]), rng=rng
        )
        result: dict[str, Any] = self._call(
            "POST", f"/v1/surveys/{survey_id}/responses", json={"reports": reports}
        )
        return result

    def estimate_synthetic(self, dataset_id: str, **release: Any) -> dict[str, Any]:
        """The charge and expected errors of a synthetic release (owners; free). ``release``:
        ``kind`` (marginals, mst, aim, mwem), ``epsilon``/``delta`` or ``rho``, ``columns``,
        ``marginals``, ``rows``."""
        path = f"/v1/datasets/{dataset_id}/synthetic:estimate"
        result: dict[str, Any] = self._call("POST", path, json=release)
        return result

    def publish_synthetic(
        self, dataset_id: str, *, wait: bool = False, poll: float = 1.0, **release: Any
    ) -> dict[str, Any]:
        """Publish a synthetic release (owners; charged once to the dataset's cap): the job,
        or with ``wait`` the finished release (polled every ``poll`` seconds)."""
        job: dict[str, Any] = self._call(
            "POST", f"/v1/datasets/{dataset_id}/synthetic", json=release
        )
        while wait and job["status"] == "running":
            time.sleep(poll)
            job = self.synthetic(job["id"])
        return job

    def synthetic(self, release_id: str) -> dict[str, Any]:
        """A synthetic release's request, cost, status and progress (free)."""
        result: dict[str, Any] = self._call("GET", f"/v1/synthetic/{release_id}")
        return result

    def synthetic_releases(self, dataset_id: str) -> list[dict[str, Any]]:
        """A dataset's synthetic releases with their cost (free)."""
        result: list[dict[str, Any]] = self._call("GET", f"/v1/datasets/{dataset_id}/synthetic")
        return result

    def synthetic_data(self, release_id: str) -> pd.DataFrame:
        """A finished synthetic release's table (free: post-processing)."""
        import pandas as pd  # noqa: PLC0415 (deferred: a client command needs no pandas)

        return pd.read_parquet(io.BytesIO(self.synthetic_file(release_id, "parquet")))

    def synthetic_file(self, release_id: str, fmt: str = "csv") -> bytes:
        """A finished synthetic release's table as the server encodes it in ``fmt`` (``csv``,
        ``parquet`` or ``json`` records; free)."""
        response = self._http.get(f"/v1/synthetic/{release_id}/data", params={"format": fmt})
        if response.status_code >= 400:
            raise _error(response)
        return response.content


def _query_body(
    sql: str,
    *,
    epsilon: float | None,
    delta: float,
    accuracy: dict[str, float | str] | None,
    noise: str | None,
    rho: float | None,
    clipping: float | None = None,
) -> dict[str, Any]:
    """A query's body: its cost as ``rho``, ``accuracy`` or ``epsilon`` (the first given), the
    noise family if named, the clipping report's share of ε if asked for."""
    body: dict[str, Any] = {"sql": sql, "delta": delta}
    if rho is not None:
        body["rho"] = rho
    elif accuracy is not None:
        body["accuracy"] = accuracy
    else:
        body["epsilon"] = epsilon
    if noise is not None:
        body["noise"] = noise
    if clipping is not None:
        body["clipping"] = clipping
    return body


def randomize_answers(
    answers: list[str], categories: list[str], epsilon: Fraction, *, rng: Rng | None = None
) -> list[int]:
    """Respondents' side of a local-model survey: each true answer (one of the public
    ``categories``) becomes a k-ary randomized response report (a category index), ε-local-DP
    (Kairouz, Oh & Viswanath 2016; :class:`~dpcurator.mechanisms.KaryRandomizedResponse`).

    Only the reports leave the respondent's machine; the true answers are never sent.
    """
    index = {category: j for j, category in enumerate(categories)}
    unknown = sorted({a for a in answers if a not in index})
    if unknown:
        raise ParameterError(f"answers must be among the survey's categories; got {unknown}.")
    # Deferred: numpy and the mechanisms load only on a respondent's machine, not per CLI call.
    import numpy as np  # noqa: PLC0415

    from dpcurator.mechanisms.randomized_response import KaryRandomizedResponse  # noqa: PLC0415

    mechanism = KaryRandomizedResponse(epsilon, len(categories))
    true = np.array([index[a] for a in answers], dtype=np.int64)
    return [int(r) for r in mechanism.randomize(true, rng)]
