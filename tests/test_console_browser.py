"""The web console in real headless Chromium: sign in, run a grouped query (table + chart), get an
over-budget refusal; screenshots go to test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from dpcurator.service.app import create_app
from dpcurator.service.server import build_service
from tests.service_fixtures import PEOPLE_METADATA, ThreadServer, cheap_hasher, write_people

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A running server; yields (base URL, analyst token)."""
    service = build_service(
        f"sqlite:///{tmp_path / 'l.sqlite3'}", hasher=cheap_hasher(), data_root=tmp_path
    )
    _, owner = service.create_principal("owner", "owner")
    csv = write_people(tmp_path / "people.csv")
    with ThreadServer(create_app(service)) as server:
        client = server.client(owner.token)
        client.post(
            "/v1/datasets",
            json={
                "id": "people",
                "source": {"path": str(csv)},
                "metadata": PEOPLE_METADATA,
                "cap_epsilon": 10,
            },
        ).raise_for_status()
        analyst = client.post("/v1/analysts", json={"name": "alice"}).json()
        client.put(
            f"/v1/analysts/{analyst['principal']['id']}/grants/people", json={"epsilon": 1}
        ).raise_for_status()
        yield server.url, analyst["token"]
    service.close()


@pytest.fixture
def page() -> Iterator[Page]:
    """A headless Chromium page."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        yield browser.new_page()
        browser.close()


def test_sign_in_query_chart_and_refusal(console: tuple[str, str], page: Page) -> None:
    url, token = console
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{url}/")
    page.fill("#token", "dpc_wrong_token")
    page.click("#signin-form button")
    expect(page.locator("#signin-error")).to_contain_text("Invalid token")
    page.fill("#token", token)
    page.click("#signin-form button")
    expect(page.locator("#whoami")).to_have_text("alice (analyst)")
    expect(page.locator("#budget")).to_contain_text("ε 1 of 1 left")
    expect(page.locator("#schema tbody tr")).to_have_count(4)
    page.screenshot(path=str(ARTIFACTS / "console-signed-in.png"), full_page=True)

    page.select_option("#b-agg", "COUNT")
    page.select_option("#b-group", "region")
    page.click("#b-apply")
    expect(page.locator("#sql")).to_have_value(
        "SELECT region, COUNT(*) AS count_rows FROM people GROUP BY region"
    )
    page.fill("#epsilon", "0.5")
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Released")
    expect(page.locator("#result-table tbody tr")).to_have_count(4)
    expect(page.locator("#result-table .ci").first).to_be_visible()
    expect(page.locator("#chart svg rect.bar")).to_have_count(4)
    expect(page.locator("#chart svg line.whisker")).to_have_count(4)
    expect(page.locator("#budget")).to_contain_text("ε 0.5 of 1 left")
    expect(page.locator("#history tbody tr")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "console-query-chart.png"), full_page=True)

    page.fill("#epsilon", "0.75")
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Refused, nothing charged")
    expect(page.locator("#message")).to_have_class("error")
    expect(page.locator("#budget")).to_contain_text("ε 0.5 of 1 left")
    page.screenshot(path=str(ARTIFACTS / "console-refusal.png"), full_page=True)
