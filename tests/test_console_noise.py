"""The console's noise selector and accuracy-first input (issue 18 §1-2) in headless Chromium:
the estimate and the release use the family chosen, and a target half-width per output makes the
estimate show the cost the server chose for it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.test_console_browser import GROUPED, Console, console, page, sign_in

__all__ = ["console", "page"]

pytestmark = pytest.mark.browser


def _server_estimate(console: Console, **body: object) -> dict[str, object]:
    answer = console.analyst_client.post(
        "/v1/datasets/people/queries:estimate", json={"sql": GROUPED, **body}
    )
    answer.raise_for_status()
    estimate: dict[str, object] = answer.json()
    return estimate


def test_accuracy_first_shows_the_cost_a_target_needs(console: Console, page: Page) -> None:
    sign_in(page, console, console.analyst, "alice (analyst)")
    needed = _server_estimate(console, accuracy={"count_rows": 40})
    cost = needed["cost"]
    assert isinstance(cost, dict)
    page.fill("#sql", GROUPED)
    page.fill("#target", "40")
    page.click("#estimate")
    expect(page.locator("#message")).to_contain_text(f"Estimated cost: ε {cost['epsilon']:g}")
    expect(page.locator("#estimate-panel tbody tr")).to_have_count(1)
    page.click("#run")
    expect(page.locator("#message")).to_contain_text(f"Released: cost ε {cost['epsilon']:g}")
    expect(page.locator("#budget")).to_contain_text(f"ε {1 - float(cost['epsilon']):g} of 1 left")


def test_the_noise_family_reaches_the_estimate_and_the_release(
    console: Console, page: Page
) -> None:
    owner = console.owner_client
    owner.patch("/v1/datasets/people", json={"cap_delta": 1e-3}).raise_for_status()
    analyst_id = console.analyst_client.get("/v1/me").json()["id"]
    owner.put(
        f"/v1/analysts/{analyst_id}/grants/people",
        json={"epsilon": 1, "delta": 1e-3, "accounting": "concentrated"},
    ).raise_for_status()
    at = {"epsilon": 0.5, "delta": 1e-6}
    widths = {
        family: _server_estimate(console, noise=family, **at)["estimate"]["ci_halfwidths"][  # type: ignore[index]
            "count_rows"
        ]
        for family in ("laplace", "gaussian")
    }
    assert widths["laplace"] != widths["gaussian"]
    sign_in(page, console, console.analyst, "alice (analyst)")
    expect(page.locator("#budget")).to_contain_text("concentrated accounting")
    page.fill("#sql", GROUPED)
    page.fill("#epsilon", "0.5")
    page.fill("#delta", "1e-6")
    for family in ("laplace", "gaussian"):
        page.select_option("#noise", family)
        page.click("#estimate")
        expect(page.locator("#estimate-panel tbody tr")).to_have_text(
            [re.compile(rf"count_rows\s*± {widths[family]:g}")]
        )
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Released: cost ε 0.5")
    expect(page.locator("#result tbody tr")).to_have_count(4)
