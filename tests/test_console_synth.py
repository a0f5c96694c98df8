"""The console's synthetic releases (issue 15 §3) in headless Chromium: the owner's Publish panel
estimates for free (the server's cost and per-marginal errors), publishes only what was
estimated, shows the job's progress and then download buttons; analysts list the dataset's
releases and download them for free."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from tests.test_console_browser import ARTIFACTS, Console, console, page, sign_in

__all__ = ["console", "page"]

pytestmark = pytest.mark.browser

BODY = {"kind": "mwem", "epsilon": 1.0, "delta": 0.0, "columns": ["sex", "region"], "rows": 300}


def _cap_spent(console: Console) -> float:
    spent: float = console.owner_client.get("/v1/datasets/people").json()["cap"]["spent"]["epsilon"]
    return spent


def _fill(page: Page) -> None:
    page.select_option("#s-kind", "mwem")
    page.fill("#s-epsilon", "1")
    page.fill("#s-rows", "300")
    for column in ("age", "income"):
        page.uncheck(f"#s-columns input[value={column}]")


def test_owner_estimates_publishes_and_downloads(console: Console, page: Page) -> None:
    sign_in(page, console, console.owner, "owner (owner)")
    expect(page.locator("#publish-panel")).to_be_visible()
    expect(page.locator("#synthetic-empty")).to_be_visible()
    expect(page.locator("#s-columns input")).to_have_count(4)  # every column has keys or bounds
    expect(page.locator("#s-publish")).to_be_disabled()
    _fill(page)
    expect(page.locator("#s-delta")).to_have_value("0")  # MWEM is pure ε
    page.click("#s-estimate")
    server = console.owner_client.post("/v1/datasets/people/synthetic:estimate", json=BODY).json()
    expect(page.locator("#s-message")).to_contain_text(
        f"Estimated cost: ε {server['cost']['epsilon']:g}, δ 0 — fits the dataset's cap."
    )
    rows = page.locator("#s-estimate-panel tbody tr")
    expect(rows).to_have_count(len(server["expected_errors"]))
    halfwidth = server["expected_errors"][0]["ci_halfwidth"]
    expect(rows.first).to_contain_text(f"{float(f'{halfwidth:.6g}'):g}")
    assert _cap_spent(console) == 0  # the estimate is free
    page.fill("#s-rows", "200")  # a changed request needs a new estimate
    expect(page.locator("#s-publish")).to_be_disabled()
    page.fill("#s-rows", "300")
    page.click("#s-estimate")
    expect(page.locator("#s-publish")).to_be_enabled()

    page.click("#s-publish")
    expect(page.locator("#s-message")).to_contain_text("is ready (300 rows)", timeout=120_000)
    expect(page.locator("#s-progress-text")).to_have_text("done")
    assert _cap_spent(console) == 1
    expect(page.locator("#budget")).to_contain_text("ε 9 of 10 left")
    listed = page.locator("#synthetic tbody tr")
    expect(listed).to_have_count(1)
    expect(listed.first).to_contain_text("done")
    expect(listed.first).to_contain_text("ε 1, δ 0")
    history = page.locator("#history tbody tr")
    expect(history).to_have_count(1)
    expect(history.first.locator("button.open")).to_have_count(0)  # not a query result
    with page.expect_download() as info:
        page.click("#s-message button.download-csv")
    frame = pd.read_csv(info.value.path())
    assert info.value.suggested_filename.endswith(".csv")
    assert list(frame.columns) == ["sex", "region"]
    assert len(frame) == 300
    assert set(frame["sex"]) <= {"F", "M"}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-synthetic-owner.png"), full_page=True)


def test_a_release_over_the_cap_cannot_be_published(console: Console, page: Page) -> None:
    sign_in(page, console, console.owner, "owner (owner)")
    page.select_option("#s-kind", "mst")  # δ > 0; the cap's δ is 0
    expect(page.locator("#s-delta")).to_have_value("1e-9")
    page.click("#s-estimate")
    expect(page.locator("#s-message")).to_contain_text("does NOT fit the dataset's cap")
    expect(page.locator("#s-publish")).to_be_disabled()
    page.select_option("#s-kind", "mwem")
    page.fill("#s-rows", "-3")
    page.click("#s-estimate")
    expect(page.locator("#s-message")).to_contain_text("Refused")
    expect(page.locator("#s-publish")).to_be_disabled()
    assert _cap_spent(console) == 0


def test_analysts_list_and_download_for_free(console: Console, page: Page) -> None:
    job = console.owner_client.post("/v1/datasets/people/synthetic", json=BODY).json()
    sign_in(page, console, console.analyst, "alice (analyst)")
    expect(page.locator("#publish-panel")).to_be_hidden()
    row = page.locator("#synthetic tbody tr")
    expect(row).to_have_count(1)
    expect(row.first).to_contain_text(job["id"])
    for _ in range(240):  # the list shows the job's state when loaded: reload until it is done
        if row.first.locator("button.download-parquet").count():
            break
        page.select_option("#dataset", "people")
        page.evaluate("loadSynthetic()")
        page.wait_for_timeout(500)
    with page.expect_download() as info:
        row.first.locator("button.download-parquet").click()
    frame = pd.read_parquet(io.BytesIO(Path(info.value.path()).read_bytes()))
    assert len(frame) == 300
    expect(page.locator("#budget")).to_contain_text("ε 1 of 1 left")  # downloading is free
