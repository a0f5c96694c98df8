"""Local-model surveys: randomized response over k public categories (issue 16, §3).

Respondents randomise their own answer before sending it (:func:`dpcurator.service.client.
randomize_answers`, k-ary randomized response, Kairouz, Oh & Viswanath 2016): each report is
ε-local-DP with respect to the respondent's true answer, so the server never holds a true answer
and nothing it releases costs any central budget. The server keeps only how many reports each
category received, and releases the frequency estimates with normal-approximation confidence
intervals of :meth:`~dpcurator.mechanisms.KaryRandomizedResponse.estimate_frequencies`
(post-processing of the reports), each clipped to [0, 1] (:func:`unit_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpcurator.errors import ParameterError
from dpcurator.mechanisms.randomized_response import FrequencyEstimate, KaryRandomizedResponse
from dpcurator.service.auth import Identity, random_id
from dpcurator.service.errors import NotFoundError
from dpcurator.service.ledger import Ledger
from dpcurator.service.models import Survey
from dpcurator.streams.pan_private import clip_to_unit


@dataclass(frozen=True)
class SurveyEstimate:
    """Estimated share of each category, with (1-α) intervals, from ``reports`` reports."""

    reports: int
    rows: list[dict[str, Any]]
    alpha: float


def mechanism(survey: Survey) -> KaryRandomizedResponse:
    """The randomized response every respondent of ``survey`` applies."""
    return KaryRandomizedResponse(Fraction(survey.epsilon), len(survey.categories))


class SurveyStore:
    """Create surveys, count randomised reports and release the estimates."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def create(
        self, identity: Identity, name: str, categories: list[str], epsilon: Fraction
    ) -> Survey:
        """A new survey (owners); categories and ε are public and checked here."""
        identity.require_owner()
        if len(set(categories)) != len(categories):
            raise ParameterError("categories must be distinct.")
        KaryRandomizedResponse(epsilon, len(categories))  # refuses k < 2 or ε < 1e-9
        survey = Survey(
            id=f"srv_{random_id(9)}",
            name=name,
            categories=list(categories),
            epsilon=str(epsilon),
            counts=[0] * len(categories),
            created_by=identity.principal_id,
        )
        with self.ledger._transaction(write=True) as s:
            s.add(survey)
        return survey

    def get(self, survey_id: str) -> Survey:
        """The survey, or NotFoundError."""
        with self.ledger._transaction(write=False) as s:
            survey = s.get(Survey, survey_id)
        if survey is None:
            raise NotFoundError(f"No survey with id {survey_id!r}.")
        return survey

    def submit(self, survey_id: str, reports: list[int]) -> int:
        """Add already-randomised reports (category indices); the total number of reports."""
        with self.ledger._transaction(write=True) as s:
            survey = s.get(Survey, survey_id, with_for_update=True)
            if survey is None:
                raise NotFoundError(f"No survey with id {survey_id!r}.")
            k = len(survey.categories)
            bad = [r for r in reports if not 0 <= r < k]
            if bad:
                raise ParameterError(f"reports must be category indices in [0, {k - 1}].")
            added = np.bincount(np.asarray(reports, dtype=np.int64), minlength=k)
            survey.counts = [int(c) + int(a) for c, a in zip(survey.counts, added, strict=True)]
            return sum(survey.counts)

    def estimate(self, survey_id: str, alpha: float = 0.05) -> SurveyEstimate:
        """Frequency estimates with CIs (post-processing; costs nothing): see
        :func:`unit_rows`."""
        survey = self.get(survey_id)
        counts = np.asarray(survey.counts, dtype=np.int64)
        total = int(counts.sum())
        if total == 0:
            raise ParameterError(f"Survey {survey_id!r} has no reports yet.")
        reports = np.repeat(np.arange(counts.size), counts)
        out = mechanism(survey).estimate_frequencies(reports, alpha)
        return SurveyEstimate(total, unit_rows(survey.categories, out), out.alpha)


def unit_rows(categories: list[str], out: FrequencyEstimate) -> list[dict[str, Any]]:
    """One row per category: its share's estimate and (1-α) interval, each clipped to [0, 1]
    (:func:`~dpcurator.streams.pan_private.clip_to_unit`). A share lies in [0, 1], so the
    clipped interval holds the truth whenever the normal-approximation one does (same
    coverage, never wider); the estimate is clipped too (no farther from the truth, no longer
    unbiased), so it always lies inside its interval."""
    rows = []
    for j, category in enumerate(categories):
        low, point, high = clip_to_unit(
            float(out.ci_low[j]), float(out.estimate[j]), float(out.ci_high[j])
        )
        rows.append({"category": category, "estimate": point, "ci_low": low, "ci_high": high})
    return rows
