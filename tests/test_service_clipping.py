"""The clipping report over HTTP (issue 14): ``clipping`` in query and estimate requests
(:mod:`dpcurator.query.plan.clipping`); the release JSON carries it; refusals charge nothing."""

from __future__ import annotations

from fractions import Fraction

from dpcurator.core.measures import ApproxDP
from tests.test_service_api import Kit, _assert_problem, _spent, kit

__all__ = ["kit"]

MEAN = "SELECT sex, AVG(income) AS h FROM people GROUP BY sex"


def test_clipping_is_estimated_charged_within_epsilon_and_released(kit: Kit) -> None:
    body = {"sql": MEAN, "epsilon": 0.5, "clipping": 0.2}
    estimate = kit.alice.post("/v1/datasets/people/queries:estimate", json=body)
    assert estimate.status_code == 200, estimate.text
    assert Fraction(estimate.json()["cost"]["epsilon_exact"]) == Fraction(1, 2)
    statistics = [m["statistic"] for m in estimate.json()["estimate"]["mechanisms"]]
    assert "clipping counts (below, within, above)" in statistics
    response = kit.alice.post("/v1/datasets/people/queries", json=body)
    assert response.status_code == 200, response.text
    clipping = response.json()["release"]["clipping"]
    assert [(c["group"], c["columns"]) for c in clipping] == [
        ({"sex": "F"}, ["h"]),
        ({"sex": "M"}, ["h"]),
    ]
    assert _spent(kit) == ApproxDP(Fraction(1, 2), 0)
    plain = kit.alice.post("/v1/datasets/people/queries", json={"sql": MEAN, "epsilon": 0.5})
    assert plain.json()["release"]["clipping"] == []


def test_bad_clipping_is_refused_free(kit: Kit) -> None:
    share = {"sql": MEAN, "epsilon": 0.5, "clipping": 1.5}
    assert kit.alice.post("/v1/datasets/people/queries", json=share).status_code == 422
    count = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5, "clipping": 0.1}
    _assert_problem(
        kit.alice.post("/v1/datasets/people/queries", json=count), 422, "unsupported-query"
    )
    assert _spent(kit) == ApproxDP(0, 0)
