"""What the curator does for each request, independent of HTTP: who may see what, and the
reserve -> run -> commit sequence of every release.

The HTTP layer (:mod:`dpcurator.service.app`) authenticates the caller and maps errors to problem
documents; everything that touches budgets or data goes through :class:`CuratorService`.

A query costs three ledger transactions: one read (visibility and budget, before planning, so an
analyst without a grant learns nothing about the dataset), the atomic reservation, and the commit
of the release. The caller's remaining budget is the one written by its own reservation.

After the charge, an analyst learns nothing of how a computation failed: the response, the
history entry and the ledger hold :data:`~dpcurator.errors.ENGINE_FAILURE_MESSAGE`, and the
details go to the ``dpcurator.engine`` logger (the owner's server log).

A request with an ``Idempotency-Key`` is answered once: its key is looked up before replay, so a
retry gets the first answer (or 409 while it is computing), never a second row for the key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpcurator.accounting.filter import BudgetFilter
from dpcurator.core.measures import ZCDP, ApproxDP
from dpcurator.errors import (
    ENGINE_FAILURE_MESSAGE,
    BackendError,
    BudgetExceededError,
    DPError,
)
from dpcurator.service.auth import Identity, IssuedToken, TokenAuthority, random_id
from dpcurator.service.curator import (
    AlreadyCharged,
    Catalog,
    DatasetRuntime,
    LedgerFilter,
    NoiseRequest,
)
from dpcurator.service.errors import ConflictError, NotFoundError
from dpcurator.service.idempotency import request_fingerprint, stored_result
from dpcurator.service.ledger import Access, Ledger
from dpcurator.service.ledger.accounts import basic_cost, basic_event
from dpcurator.service.ledger.budgets import BudgetView, Cost, dataset_budget
from dpcurator.service.ledger.charges import ChargeRequest
from dpcurator.service.models import Charge, Dataset, Principal, PublishedRelease
from dpcurator.service.refusals import RefusalLimiter, audited_sql

_LOG = logging.getLogger("dpcurator.service")
_ENGINE_LOG = logging.getLogger("dpcurator.engine")

#: A quoted string or identifier (kept verbatim; a doubled quote escapes it), or a run of
#: whitespace and comments (one space).
_SQL_PIECES = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|(?:\s|--[^\n]*|/\*.*?\*/)+""", re.DOTALL)


def _piece(match: re.Match[str]) -> str:
    text = match.group()
    return text if text[0] in "'\"" else " "


def normalise_sql(sql: str) -> str:
    """SQL with every run of whitespace and comments OUTSIDE quotes made one space, and trailing
    semicolons dropped (for replay): ``'a  b'`` stays a different literal from ``'a b'``."""
    return _SQL_PIECES.sub(_piece, sql).strip().rstrip(";").rstrip()


def fingerprint(
    sql: str,
    epsilon: Fraction,
    delta: Fraction,
    accuracy: dict[str, float | str] | None = None,
    noise: NoiseRequest | None = None,
) -> str:
    """Identifies a question (normalised SQL, requested cost, accuracy targets and noise, if
    any) for replay and retries."""
    targets = "" if accuracy is None else f"\x00{sorted(accuracy.items())}"
    if noise is not None and noise != NoiseRequest():
        targets += f"\x00noise={noise.family}\x00rho={noise.rho}"
        if noise.clipping is not None:
            targets += f"\x00clipping={noise.clipping}"
    text = f"{normalise_sql(sql)}\x00{epsilon}\x00{delta}{targets}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Answer:
    """A released (or replayed) answer and the caller's budget afterwards."""

    charge: Charge
    replayed: bool
    remaining: BudgetView | None


@dataclass(frozen=True)
class Estimate:
    """The cost and expected accuracy of a query, without running it; ``fits``: whether the
    ledger would admit its event now (under each budget's accounting)."""

    cost: Cost
    details: dict[str, Any]
    fits: bool
    remaining: BudgetView | None


def fits_budget(access: Access, cost: ApproxDP) -> bool:
    """Whether an (ε, δ) ``cost`` fits the dataset's cap and the caller's own budget (if any)
    now: indicative for concentrated budgets (compared with what remains in (ε, δ); a ρ budget
    holds no (ε, δ)), where the reservation's replay decides (:meth:`Ledger.fits` asks it)."""
    views: list[BudgetView] = [dataset_budget(access.dataset)]
    if access.budget is not None:
        views.append(access.budget)
    return all(
        isinstance(view.remaining, ApproxDP) and cost.fits_within(view.remaining) for view in views
    )


def _as_request(cost: Cost, noise: NoiseRequest | None) -> tuple[Fraction, NoiseRequest | None]:
    """The (ε, noise) that name an accuracy query's planned ``cost`` in its fingerprint and
    audit: the ε of an (ε, δ) cost, or (at δ = 0, Gaussian noise) its ρ, as a ρ query is named."""
    if isinstance(cost, ZCDP):
        return Fraction(0), replace(noise or NoiseRequest(), rho=cost.rho)
    return cost.epsilon, noise


def _requested(epsilon: Fraction, delta: Fraction, noise: NoiseRequest | None) -> dict[str, str]:
    """The cost a refused query asked for, as audited."""
    if noise is not None and noise.rho is not None:
        return {"rho": str(noise.rho), "noise": str(noise.family)}
    requested = {"epsilon": str(epsilon), "delta": str(delta)}
    return requested if noise is None else {**requested, "noise": str(noise.family)}


@dataclass(frozen=True)
class BatchQuery:
    """One query of a batch release."""

    sql: str
    epsilon: Fraction
    delta: Fraction


class CuratorService:
    """Owners, analysts, datasets, budgets, queries and releases."""

    def __init__(self, ledger: Ledger, authority: TokenAuthority, catalog: Catalog) -> None:
        self.ledger = ledger
        self.authority = authority
        self.catalog = catalog
        self.refusals = RefusalLimiter()

    def open_datasets(self) -> None:
        """Open every registered dataset now (at start-up), so that no request waits for one.

        A dataset that cannot be opened (e.g. its file is gone) is logged and left closed: its
        queries report the error, the other datasets are served.
        """
        for dataset in self.ledger.datasets():
            try:
                self.catalog.runtime(dataset)
            except DPError as exc:
                _LOG.warning("dataset %r not opened at start-up: %s", dataset.id, exc)

    def close(self) -> None:
        """Close the opened datasets and the ledger's connections."""
        self.catalog.close()
        self.ledger.close()

    # -- principals -------------------------------------------------------------------------

    def create_principal(
        self, name: str, role: str, *, expires_in: float | None = None, by: str | None = None
    ) -> tuple[Principal, IssuedToken]:
        """Create an owner or analyst and its first token (shown once), ``by`` an owner (None:
        the server's operator)."""
        prefix = "own" if role == "owner" else "ana"
        principal = self.ledger.create_principal(f"{prefix}_{random_id(9)}", name, role)
        return principal, self.authority.issue(principal.id, expires_in=expires_in, by=by)

    # -- visibility -------------------------------------------------------------------------

    def access(self, identity: Identity, dataset_id: str) -> Access:
        """The dataset and the caller's budget on it; analysts see only granted datasets (404)."""
        return self.ledger.access(identity.principal_id, dataset_id, owner=identity.is_owner)

    def visible_dataset(self, identity: Identity, dataset_id: str) -> Dataset:
        """The dataset if the caller may see it; analysts see only granted datasets (else 404)."""
        return self.access(identity, dataset_id).dataset

    def visible_datasets(self, identity: Identity) -> list[Dataset]:
        """Every dataset for owners; the granted ones for analysts."""
        datasets = self.ledger.datasets()
        if identity.is_owner:
            return datasets
        granted = {g.dataset_id for g in self.ledger.grants(principal_id=identity.principal_id)}
        return [d for d in datasets if d.id in granted]

    def own_budget(self, identity: Identity, dataset: Dataset) -> BudgetView | None:
        """An analyst's budget on a dataset (None for owners, who spend only the cap)."""
        if identity.is_owner:
            return None
        return self.ledger.grant_view(identity.principal_id, dataset.id)

    def cap(self, identity: Identity, dataset: Dataset) -> BudgetView | None:
        """The global cap of a dataset, shown to owners only."""
        return self.ledger.cap_view(dataset.id) if identity.is_owner else None

    # -- datasets ---------------------------------------------------------------------------

    def register_dataset(
        self,
        identity: Identity,
        dataset_id: str,
        *,
        name: str,
        source: dict[str, Any],
        metadata_doc: dict[str, Any],
        cap: Cost,
        replay_enabled: bool,
        accounting: str | None = None,
    ) -> Dataset:
        """Check the source and metadata, then register the dataset (owners only) with its cap
        (ε, (ε, δ) or ρ) and the cap's ``accounting`` (``basic`` | ``concentrated``; default
        concentrated for δ > 0 or ρ, basic for a pure ε)."""
        identity.require_owner()
        metadata, backend = self.catalog.check(source, metadata_doc)
        try:
            dataset = self.ledger.add_dataset(
                dataset_id,
                name=name,
                source=source,
                metadata_doc=metadata,
                cap=cap,
                replay_enabled=replay_enabled,
                by=identity.principal_id,
                accounting=accounting,
            )
        except BaseException:
            backend.close()
            raise
        self.catalog.adopt(dataset, backend)
        return dataset

    def schema(self, dataset: Dataset) -> dict[str, Any]:
        """The public metadata of a dataset."""
        return self.catalog.runtime(dataset).schema()

    # -- queries ----------------------------------------------------------------------------

    def answer(
        self,
        identity: Identity,
        dataset_id: str,
        sql: str,
        epsilon: Fraction | None,
        delta: Fraction,
        *,
        request_key: str | None = None,
        accuracy: dict[str, float | str] | None = None,
        noise: NoiseRequest | None = None,
    ) -> Answer:
        """Answer a query: replay or reserve -> run -> commit. A refusal changes nothing.
        ``noise``: the noise family and/or a ρ cost (then ``epsilon`` is ignored). With
        ``accuracy`` (``epsilon`` None), the fingerprint and the audited request name the cost
        those targets need with this noise, planned by the code the release plans with
        (:meth:`DatasetRuntime.estimate`, from public inputs only).

        Raises:
            RefusalsLimitedError: this analyst was refused too often recently (429).
        """
        asked_epsilon, asked_noise = epsilon or Fraction(0), noise
        if accuracy is not None:
            runtime = self.catalog.runtime(self.access(identity, dataset_id).dataset)
            cost = runtime.estimate(sql, None, delta, accuracy=accuracy, noise=noise)[0]
            asked_epsilon, asked_noise = _as_request(cost, noise)
        return self.charged(
            identity,
            dataset_id,
            sql,
            fingerprint(sql, asked_epsilon, delta, accuracy, asked_noise),
            lambda runtime, budget: runtime.run(
                sql, epsilon, delta, budget, accuracy=accuracy, noise=noise
            ),
            request_key=request_key,
            requested=_requested(asked_epsilon, delta, asked_noise),
        )

    def charged(
        self,
        identity: Identity,
        dataset_id: str,
        text: str,
        print_: str,
        run: Callable[[DatasetRuntime, BudgetFilter], dict[str, Any]],
        *,
        request_key: str | None,
        requested: dict[str, str],
        kind: str = "query",
        replayable: bool = True,
    ) -> Answer:
        """Replay, or reserve -> ``run`` -> commit, for any release on a dataset (a query, a
        fit, a sparse vector): ``run`` plans, reserves through the given filter and returns the
        release as JSON. ``text`` is the ledger's description, ``print_`` its replay (and
        request key) fingerprint and ``kind`` the ledger entry's kind; ``replayable``: whether
        a dataset's replay switch may answer it from an earlier release. A refusal changes
        nothing; after the charge any failure is the constant engine failure."""
        self.refusals.check(identity.principal_id)
        access = self.access(identity, dataset_id)
        dataset = access.dataset
        runtime = self.catalog.runtime(dataset)
        if (
            replayable
            and dataset.replay_enabled
            and (
                request_key is None
                or self.ledger.charge_by_key(identity.principal_id, request_key) is None
            )
        ):
            original = self.ledger.find_replay(identity.principal_id, dataset.id, print_)
            if original is not None:
                replay = self.ledger.record_replay(original, request_key)
                return self._keyed_answer(dataset, replay, print_, access.budget)
        template = ChargeRequest(
            principal_id=identity.principal_id,
            dataset_id=dataset.id,
            kind=kind,
            query_text=text,
            fingerprint=print_,
            cost=ApproxDP(0, 0),
            events=[],
            request_key=request_key,
            charge_grant=not identity.is_owner,
        )
        charge_filter = LedgerFilter(self.ledger, template)
        try:
            release = run(runtime, charge_filter)
        except AlreadyCharged as done:
            charge = self.ledger.charge(done.charge_id)
            return self._keyed_answer(dataset, charge, print_, access.budget)
        except BudgetExceededError as exc:
            if charge_filter.charge_id is not None:  # not a refusal: the charge stands
                raise self._failed(charge_filter.charge_id, exc) from None
            self.refusals.spend(identity.principal_id)
            self.ledger.audit(
                "query_refused",
                identity.principal_id,
                dataset.id,
                **audited_sql(text),
                requested=requested,
                reason=str(exc),
            )
            raise
        except Exception as exc:
            if charge_filter.charge_id is None:
                raise
            raise self._failed(charge_filter.charge_id, exc) from None
        finally:
            if charge_filter.charge_id is not None and request_key is not None:
                self.ledger.drop_claim(charge_filter.charge_id)
        charge = self.ledger.complete(charge_filter.require_charge(), release)
        return Answer(charge, False, charge_filter.budget)

    def _failed(self, charge_id: int, exc: Exception) -> BackendError:
        """Record that a charged computation failed; the one error its analyst may see.

        The Session already turned an engine failure into the constant BackendError and logged
        it; anything else failing after the charge is logged here.
        """
        if not (isinstance(exc, BackendError) and str(exc) == ENGINE_FAILURE_MESSAGE):
            _ENGINE_LOG.error("charge %s failed after the charge", charge_id, exc_info=exc)
        self.ledger.fail(charge_id, ENGINE_FAILURE_MESSAGE)
        return BackendError(ENGINE_FAILURE_MESSAGE)

    @staticmethod
    def _keyed_answer(
        dataset: Dataset, charge: Charge, print_: str, budget: BudgetView | None
    ) -> Answer:
        """The answer recorded for a request key (or a replay): the same question's, finished."""
        if charge.fingerprint != print_ or charge.dataset_id != dataset.id:
            raise ConflictError(
                f"The request key {charge.request_key!r} was already used for a different "
                "request. Use a fresh key for every new question."
            )
        if charge.status == "reserved":
            raise ConflictError(
                f"The request with key {charge.request_key!r} is still running. Retry later."
            )
        if charge.status == "failed":
            raise BackendError(ENGINE_FAILURE_MESSAGE)
        return Answer(charge, charge.kind == "replay", budget)

    def estimate(
        self,
        identity: Identity,
        dataset_id: str,
        sql: str,
        epsilon: Fraction | None,
        delta: Fraction,
        *,
        accuracy: dict[str, float | str] | None = None,
        noise: NoiseRequest | None = None,
    ) -> Estimate:
        """Cost and expected accuracy of a query from public metadata; nothing is run. With
        ``accuracy`` instead of ε: the smallest cost meeting those CI half-widths; ``noise``:
        the noise family and/or a ρ cost."""
        access = self.access(identity, dataset_id)
        runtime = self.catalog.runtime(access.dataset)
        cost, details, event = runtime.estimate(sql, epsilon, delta, accuracy=accuracy, noise=noise)
        request = ChargeRequest(
            principal_id=identity.principal_id,
            dataset_id=access.dataset.id,
            kind="query",
            query_text=sql,
            fingerprint="",
            cost=basic_cost(event),
            events=[event.to_dict()],
            charge_grant=not identity.is_owner,
        )
        return Estimate(cost, details, self.ledger.fits(request), access.budget)

    def history(self, identity: Identity, dataset_id: str, *, limit: int) -> list[Charge]:
        """An analyst's own ledger entries on a dataset; every entry for owners."""
        dataset = self.visible_dataset(identity, dataset_id)
        principal = None if identity.is_owner else identity.principal_id
        return self.ledger.history(dataset_id=dataset.id, principal_id=principal, limit=limit)

    # -- batch releases ---------------------------------------------------------------------

    def publish(
        self,
        identity: Identity,
        dataset_id: str,
        name: str,
        queries: list[BatchQuery],
        *,
        request_key: str | None = None,
    ) -> PublishedRelease:
        """Run a batch once, charged as one entry against the global cap, and publish it; a
        ``request_key`` makes a retry return the release published first
        (:mod:`dpcurator.service.idempotency`)."""
        identity.require_owner()
        dataset = self.ledger.dataset(dataset_id)
        runtime = self.catalog.runtime(dataset)
        total = ApproxDP(0, 0)
        for query in queries:
            total = total + basic_cost(runtime.estimate(query.sql, query.epsilon, query.delta)[2])
        text = json.dumps([q.sql for q in queries])
        asked = [[q.sql, str(q.epsilon), str(q.delta)] for q in queries]
        reservation = self.ledger.reserve(
            ChargeRequest(
                principal_id=identity.principal_id,
                dataset_id=dataset.id,
                kind="batch",
                query_text=text,
                fingerprint=request_fingerprint("releases", name=name, queries=asked),
                cost=total,
                events=[basic_event(total).to_dict()],
                request_key=request_key,
                charge_grant=False,
            )
        )
        stored = stored_result(reservation)
        if stored is not None:
            return self.ledger.release(str(stored["release_id"]))
        if request_key is not None:
            self.ledger.hold_claim(reservation.charge_id)
        prepaid = self.catalog.prepaid_filter(total)
        results = []
        try:
            for query in queries:
                release = runtime.run(query.sql, query.epsilon, query.delta, prepaid)
                results.append({"sql": query.sql, "release": release})
        except Exception as exc:
            raise self._failed(reservation.charge_id, exc) from None
        finally:
            self.ledger.drop_claim(reservation.charge_id)
        return self.ledger.publish(
            f"rel_{random_id(9)}",
            dataset_id=dataset.id,
            name=name,
            charge_id=reservation.charge_id,
            results=results,
        )

    def visible_release(self, identity: Identity, release_id: str) -> PublishedRelease:
        """A published release, if the caller may see its dataset (else 404)."""
        release = self.ledger.release(release_id)
        try:
            self.visible_dataset(identity, release.dataset_id)
        except NotFoundError as exc:
            raise NotFoundError(f"No release with id {release_id!r}.") from exc
        return release
