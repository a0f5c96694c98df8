"""What the ledger holds about past releases: entries, replays and published releases.

Reads of the ledger's entries (one, a history, the live total of a dataset), answers given again
from history at zero cost (replays), and batch releases published to be read at no cost.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from dpcurator.core.measures import ApproxDP
from dpcurator.service.ledger.budgets import cost_of
from dpcurator.service.ledger.database import LedgerDatabase, found
from dpcurator.service.models import Charge, PublishedRelease, utcnow

_ZERO = ApproxDP(0, 0)


class LedgerHistory(LedgerDatabase):
    """Ledger entries, replays and published releases."""

    def find_replay(self, principal_id: str, dataset_id: str, fingerprint: str) -> Charge | None:
        """The latest released answer of this principal to the same question, if any."""
        with self._transaction(write=False) as s:
            return s.scalar(
                select(Charge)
                .where(
                    Charge.principal_id == principal_id,
                    Charge.dataset_id == dataset_id,
                    Charge.fingerprint == fingerprint,
                    Charge.kind == "query",
                    Charge.status == "released",
                )
                .order_by(Charge.id.desc())
                .limit(1)
            )

    def charge_by_key(self, principal_id: str, request_key: str) -> Charge | None:
        """The charge (or replay) a principal made under a request key, if any."""
        with self._transaction(write=False) as s:
            return s.scalar(
                select(Charge).where(
                    Charge.principal_id == principal_id, Charge.request_key == request_key
                )
            )

    def record_replay(self, original: Charge, request_key: str | None) -> Charge:
        """Record that ``original`` was answered again from history, at zero cost; the entry.

        If a concurrent request recorded an entry under the same request key first, that entry
        is returned instead (the caller checks it answers the same question).
        """
        try:
            return self._insert_replay(original, request_key)
        except IntegrityError:
            earlier = (
                None
                if request_key is None
                else self.charge_by_key(original.principal_id, request_key)
            )
            if earlier is None:
                raise
            return earlier

    def _insert_replay(self, original: Charge, request_key: str | None) -> Charge:
        with self._transaction(write=True) as s:
            replay = Charge(
                principal_id=original.principal_id,
                dataset_id=original.dataset_id,
                kind="replay",
                request_key=request_key,
                fingerprint=original.fingerprint,
                query_text=original.query_text,
                epsilon="0",
                delta="0",
                events=[],
                status="released",
                replay_of=original.id,
                result=original.result,
                created_at=utcnow(),
                completed_at=utcnow(),
            )
            s.add(replay)
        return replay

    def charge(self, charge_id: int) -> Charge:
        """One ledger entry, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return found(s.get(Charge, charge_id), "charge", charge_id)

    def history(
        self, *, dataset_id: str | None = None, principal_id: str | None = None, limit: int = 100
    ) -> list[Charge]:
        """Ledger entries, newest first, optionally of one dataset and/or one principal."""
        query = select(Charge).order_by(Charge.id.desc()).limit(limit)
        if dataset_id is not None:
            query = query.where(Charge.dataset_id == dataset_id)
        if principal_id is not None:
            query = query.where(Charge.principal_id == principal_id)
        with self._transaction(write=False) as s:
            return list(s.scalars(query))

    def charged_total(self, dataset_id: str) -> ApproxDP:
        """The exact sum of the live charges on a dataset (equals the dataset's running total)."""
        with self._transaction(write=False) as s:
            rows = s.execute(
                select(Charge.epsilon, Charge.delta).where(
                    Charge.dataset_id == dataset_id, Charge.status != "cancelled"
                )
            ).all()
        total = _ZERO
        for epsilon, delta in rows:
            total = total + cost_of(epsilon, delta)
        return total

    def count_charges(self, dataset_id: str) -> int:
        """How many live charges (not replays, not cancelled) a dataset has."""
        with self._transaction(write=False) as s:
            count = s.scalar(
                select(func.count())
                .select_from(Charge)
                .where(
                    Charge.dataset_id == dataset_id,
                    Charge.kind != "replay",
                    Charge.status != "cancelled",
                )
            )
        return int(count or 0)

    # -- published releases ---------------------------------------------------------------

    def publish(
        self, release_id: str, *, dataset_id: str, name: str, charge_id: int, results: list[Any]
    ) -> PublishedRelease:
        """Store a batch release (already charged) so that it can be read at no cost."""
        with self._transaction(write=True) as s:
            charge = found(s.get(Charge, charge_id), "charge", charge_id)
            charge.status, charge.completed_at = "released", utcnow()
            charge.result = {"release_id": release_id, "results": results}
            release = PublishedRelease(
                id=release_id,
                dataset_id=dataset_id,
                name=name,
                charge_id=charge_id,
                results=results,
                created_by=charge.principal_id,
                created_at=utcnow(),
            )
            s.add(release)
        return release

    def release(self, release_id: str) -> PublishedRelease:
        """A published release, or :class:`NotFoundError`."""
        with self._transaction(write=False) as s:
            return found(s.get(PublishedRelease, release_id), "release", release_id)

    def releases(self, dataset_id: str) -> list[PublishedRelease]:
        """The releases published on a dataset, newest first."""
        with self._transaction(write=False) as s:
            return list(
                s.scalars(
                    select(PublishedRelease)
                    .where(PublishedRelease.dataset_id == dataset_id)
                    .order_by(PublishedRelease.created_at.desc(), PublishedRelease.id)
                )
            )
