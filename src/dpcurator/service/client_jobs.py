"""Background jobs in the Python client (:class:`~dpcurator.service.client.CuratorClient`).

A long release (a fit with many blocks, a sparse vector of many queries) may be answered
``202 Accepted`` with a job (:mod:`dpcurator.service.jobs`); the client polls ``GET
/v1/jobs/{id}`` until it ends and returns the body the route answers synchronously, so callers
see no difference but the time, and may watch the job's progress.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dpcurator.errors import BackendError, DPError
from dpcurator.service.http_transport import Response, Transport

Progress = Callable[[dict[str, Any]], None]


class JobCalls:
    """The job calls of the client (it provides ``_http``, ``_call`` and ``_error``)."""

    _http: Transport

    def _call(
        self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        raise NotImplementedError

    def _error(self, response: Response) -> DPError:
        raise NotImplementedError

    def _submit(
        self,
        path: str,
        body: dict[str, Any],
        *,
        key: str | None,
        background: bool,
        wait: bool,
        progress: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any]:
        """POST a release that may run as a job: its answer, waiting for the job (``progress``
        is called with it at each poll) unless ``wait`` is False (then the job itself).
        ``background``: ask for a job (``Prefer: respond-async``) even for short work."""
        headers = {} if key is None else {"Idempotency-Key": key}
        if background:
            headers["Prefer"] = "respond-async"
        response = self._http.post(path, json=body, headers=headers)
        if response.status_code >= 400:
            raise self._error(response)
        answer: dict[str, Any] = response.json()
        if response.status_code != 202 or not wait:
            return answer
        return self.wait_job(answer["id"], progress=progress, first=answer)

    def job(self, job_id: str) -> dict[str, Any]:
        """A background job: status, progress, cost and, once done, its ``result`` (free)."""
        result: dict[str, Any] = self._call("GET", f"/v1/jobs/{job_id}")
        return result

    def jobs(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """This token's background jobs, newest first (free)."""
        result: list[dict[str, Any]] = self._call("GET", f"/v1/jobs?limit={limit}")
        return result

    def wait_job(
        self,
        job_id: str,
        *,
        progress: Callable[[dict[str, Any]], None] | None = None,
        first: dict[str, Any] | None = None,
        poll: float = 0.25,
        max_poll: float = 2.0,
    ) -> dict[str, Any]:
        """Poll a job until it ends (every ``poll`` seconds, growing to ``max_poll``): the body
        its route answers synchronously. ``progress`` is called with the job at each poll.

        Raises:
            BackendError: the job failed after its charge (the charge stands; the error's
                text says so).
        """
        job = first or self.job(job_id)
        while True:
            if progress is not None:
                progress(job)
            if job["status"] == "done":
                done: dict[str, Any] = job["result"]
                return done
            if job["status"] == "failed":
                error = job.get("error") or {}
                charged = " (the charge stands)" if job.get("charged") else ""
                raise BackendError(f"Job {job_id} failed{charged}: {error.get('detail', '')}")
            time.sleep(poll)
            poll = min(poll * 1.5, max_poll)
            job = self.job(job_id)
