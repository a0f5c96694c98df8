"""The console's Publish panel for contingency tables with a ρ budget (issue 15), in headless
Chromium: the owner names the marginals ("sex,region; region") and gives ρ (with δ, as the ledger
charges (ε, δ)), sees the server's cost and each table's error for free, publishes exactly what
was estimated and downloads the tables asked for."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from tests.service_fixtures import PEOPLE_METADATA, write_people
from tests.test_console_browser import Console, console, page, sign_in

__all__ = ["console", "page"]

pytestmark = pytest.mark.browser

COLUMNS = ["age", "sex", "region", "income"]
BODY = {
    "kind": "marginals",
    "rho": 0.05,
    "delta": 1e-9,
    "columns": COLUMNS,
    "marginals": [["sex", "region"], ["region"]],
}


def _census(console: Console, tmp_path: Path) -> None:
    """A second dataset whose cap has a δ > 0: a ρ-zCDP release is charged (ε, δ > 0)."""
    console.owner_client.post(
        "/v1/datasets",
        json={
            "id": "census",
            "source": {"path": str(write_people(tmp_path / "census.csv"))},
            "metadata": PEOPLE_METADATA,
            "cap_epsilon": 10,
            "cap_delta": 1e-6,
        },
    ).raise_for_status()


def _spent(console: Console) -> float:
    cap = console.owner_client.get("/v1/datasets/census").json()["cap"]
    spent: float = cap["spent"]["epsilon"]
    return spent


def _spent_rho(console: Console) -> float:
    """The ρ charged to the cap's zCDP part (its accounting is concentrated: δ > 0)."""
    cap = console.owner_client.get("/v1/datasets/census").json()["cap"]
    assert cap["accounting"] == "concentrated"
    rho: float = cap["native"]["spent"]["rho"]
    return rho


def test_marginals_release_with_rho_estimate_publish_download(
    console: Console, page: Page, tmp_path: Path
) -> None:
    _census(console, tmp_path)
    sign_in(page, console, console.owner, "owner (owner)")
    page.select_option("#dataset", "census")
    expect(page.locator("#publish-panel")).to_be_visible()
    page.select_option("#s-kind", "marginals")
    expect(page.locator("#s-rows")).to_be_disabled()
    page.select_option("#s-budget", "rho")
    expect(page.locator("#s-epsilon")).to_be_disabled()
    page.fill("#s-rho", "0.05")
    page.fill("#s-delta", "1e-9")
    page.fill("#s-marginals", " sex, region ;region; ")
    page.click("#s-estimate")

    server = console.owner_client.post("/v1/datasets/census/synthetic:estimate", json=BODY).json()
    epsilon = server["cost"]["epsilon"]
    shown = f"{float(f'{epsilon:.6g}'):g}"  # the console's 6 significant digits
    expect(page.locator("#s-message")).to_contain_text(
        f"Estimated cost: ε {shown}, δ 1e-9 (ρ 0.05) — fits the dataset's cap."
    )
    rows = page.locator("#s-estimate-panel tbody tr")
    expect(rows).to_have_count(2)  # one per marginal asked for, not every 1- and 2-way table
    expect(rows.nth(0)).to_contain_text("sex x region")
    expect(rows.nth(1)).to_contain_text("region")
    assert _spent(console) == 0  # the estimate is free
    page.fill("#s-marginals", "sex")  # a changed request needs a new estimate
    expect(page.locator("#s-publish")).to_be_disabled()
    page.fill("#s-marginals", "sex,region; region")
    page.click("#s-estimate")
    expect(page.locator("#s-publish")).to_be_enabled()

    page.click("#s-publish")
    expect(page.locator("#s-message")).to_contain_text("is ready (12 rows)", timeout=120_000)
    # the concentrated cap charges the release's ρ (not its (ε, δ) conversion): the ρ asked for,
    # less the rounding of the noise scales up; the spent ε shown is at most the estimate's
    assert 0.049 < _spent_rho(console) <= 0.05
    assert 0 < _spent(console) <= epsilon
    listed = page.locator("#synthetic tbody tr")
    expect(listed).to_have_count(1)
    expect(listed.first).to_contain_text("marginals")
    with page.expect_download() as info:
        page.click("#s-message button.download-csv")
    tables = pd.read_csv(info.value.path())
    assert sorted(set(tables["marginal"])) == ["region", "sex x region"]
    assert len(tables) == 12  # 2 x 4 cells and 4 cells


def test_mwem_takes_no_rho_and_mst_no_marginals(console: Console, page: Page) -> None:
    sign_in(page, console, console.owner, "owner (owner)")
    page.select_option("#s-kind", "aim")
    page.select_option("#s-budget", "rho")
    page.select_option("#s-kind", "mwem")  # pure ε: the budget goes back to ε, δ = 0
    expect(page.locator("#s-budget")).to_have_value("epsilon")
    expect(page.locator("#s-rho")).to_be_disabled()
    expect(page.locator("#s-budget option[value=rho]")).to_be_disabled()
    expect(page.locator("#s-delta")).to_have_value("0")
    page.fill("#s-marginals", "sex,region")
    page.select_option("#s-kind", "mst")
    expect(page.locator("#s-marginals")).to_be_disabled()
    expect(page.locator("#s-marginals")).to_have_value("")
