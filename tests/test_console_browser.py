"""The web console in real headless Chromium (Playwright): sign in, build and run queries (table,
chart with axes and CI bars, CSV), refusals that clear the stale result, the free estimate, the
history (reopen a result; the owner's analyst column and batches), and a 390 px wide phone
layout that never scrolls sideways. Screenshots go to test-artifacts/."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
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
GROUPED = "SELECT region, COUNT(*) AS count_rows FROM people GROUP BY region"
AGGREGATES = [
    "COUNT",
    "SUM",
    "AVG",
    "VARIANCE",
    "STDDEV",
    "MEDIAN",
    "QUANTILE",
    "MIN",
    "MAX",
    "HISTOGRAM",
]


@dataclass
class Console:
    """A running server with dataset ``people``: the analyst alice (ε = 1) and the owner."""

    url: str
    analyst: str
    owner: str
    owner_client: httpx.Client
    analyst_client: httpx.Client


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    """A running server, its dataset, an owner and an analyst."""
    service = build_service(
        f"sqlite:///{tmp_path / 'l.sqlite3'}", hasher=cheap_hasher(), data_root=tmp_path
    )
    _, owner = service.create_principal("owner", "owner")
    data = write_people(tmp_path / "people.csv")
    with ThreadServer(create_app(service)) as server:
        client = server.client(owner.token)
        client.post(
            "/v1/datasets",
            json={
                "id": "people",
                "source": {"path": str(data)},
                "metadata": PEOPLE_METADATA,
                "cap_epsilon": 10,
            },
        ).raise_for_status()
        analyst = client.post("/v1/analysts", json={"name": "alice"}).json()
        client.put(
            f"/v1/analysts/{analyst['principal']['id']}/grants/people", json={"epsilon": 1}
        ).raise_for_status()
        yield Console(
            server.url, analyst["token"], owner.token, client, server.client(analyst["token"])
        )
    service.close()


@pytest.fixture
def page() -> Iterator[Page]:
    """A headless Chromium page (downloads allowed); the test fails on any uncaught script
    error or CSP violation on it."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        page = browser.new_page(accept_downloads=True)
        faults: list[str] = []  # uncaught script errors and Content-Security-Policy violations
        page.on("pageerror", lambda error: faults.append(str(error)))
        page.on(
            "console",
            lambda m: faults.append(m.text) if "Content Security Policy" in m.text else None,
        )
        yield page
        browser.close()
        assert faults == []


def sign_in(page: Page, console: Console, token: str, who: str) -> None:
    page.goto(f"{console.url}/")
    page.fill("#token", token)
    page.click("#signin-form button")
    expect(page.locator("#whoami")).to_have_text(who)
    expect(page.locator("#schema tbody tr")).to_have_count(4)


def run(page: Page, sql: str, epsilon: str) -> None:
    page.fill("#sql", sql)
    page.fill("#epsilon", epsilon)
    page.click("#run")


def test_sign_in_query_chart_and_refusal(console: Console, page: Page) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{console.url}/")
    page.fill("#token", "dpc_wrong_token")
    page.click("#signin-form button")
    expect(page.locator("#signin-error")).to_contain_text("Invalid token")
    sign_in(page, console, console.analyst, "alice (analyst)")
    expect(page.locator("#budget")).to_contain_text("ε 1 of 1 left")
    page.screenshot(path=str(ARTIFACTS / "console-signed-in.png"), full_page=True)

    page.select_option("#b-agg", "COUNT")
    page.check("#b-groups input[value=region]")
    page.click("#b-apply")
    expect(page.locator("#sql")).to_have_value(GROUPED)
    page.fill("#epsilon", "0.5")
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Released")
    expect(page.locator("#result tbody tr")).to_have_count(4)
    expect(page.locator("#result td .ci").first).to_be_visible()
    expect(page.locator("#result svg rect.bar")).to_have_count(4)
    expect(page.locator("#result svg line.whisker")).to_have_count(4)
    expect(page.locator("#budget")).to_contain_text("ε 0.5 of 1 left")
    expect(page.locator("#history tbody tr")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "console-query-chart.png"), full_page=True)


def test_refusal_clears_the_stale_result_and_says_nothing_charged_once(
    console: Console, page: Page
) -> None:
    sign_in(page, console, console.analyst, "alice (analyst)")
    run(page, GROUPED, "0.5")
    expect(page.locator("#result tbody tr")).to_have_count(4)
    run(page, GROUPED, "0.75")  # over budget: refused before any charge
    message = page.locator("#message")
    expect(message).to_contain_text("Refused")
    expect(message).to_have_class("error")
    expect(page.locator("#result tbody tr")).to_have_count(0)
    expect(page.locator("#result svg")).to_have_count(0)
    assert message.inner_text().lower().count("nothing") == 1, message.inner_text()
    run(page, "SELECT nope FROM people", "0.1")  # a planner refusal, also free
    expect(message).to_contain_text("Unknown column 'nope'")
    assert message.inner_text().lower().count("nothing") == 1, message.inner_text()
    expect(page.locator("#budget")).to_contain_text("ε 0.5 of 1 left")
    page.screenshot(path=str(ARTIFACTS / "console-refusal.png"), full_page=True)


def assert_no_sideways_scroll(page: Page, who: str) -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], (who, widths)


def test_phone_width_never_scrolls_sideways(console: Console, page: Page) -> None:
    """At 390 px wide (a phone) the page is no wider than the window, for both roles, with a
    released table, its chart, the history and the owner's tables on it."""
    long_sql = GROUPED.replace("count_rows", "a_rather_long_column_alias_for_the_row_count")
    console.analyst_client.post(
        "/v1/datasets/people/queries", json={"sql": long_sql, "epsilon": 0.1}
    ).raise_for_status()
    page.set_viewport_size({"width": 390, "height": 844})
    for token, who in [(console.analyst, "alice (analyst)"), (console.owner, "owner (owner)")]:
        sign_in(page, console, token, who)
        expect(page.locator("#history tbody tr").first).to_be_visible()
        assert_no_sideways_scroll(page, who)
        run(page, long_sql, "0.1")
        expect(page.locator("#message")).to_contain_text("Released")
        expect(page.locator("#result svg rect.bar")).to_have_count(4)
        assert_no_sideways_scroll(page, who)
        page.screenshot(path=str(ARTIFACTS / f"console-390px-{who.split()[0]}.png"), full_page=True)
        page.click("#signout")


def test_builder_offers_every_aggregate_and_keeps_its_choices(console: Console, page: Page) -> None:
    sign_in(page, console, console.analyst, "alice (analyst)")
    values = page.locator("#b-agg option").evaluate_all("(options) => options.map(o => o.value)")
    assert values == AGGREGATES
    for aggregate in AGGREGATES:  # each one writes SQL the planner accepts (estimates are free)
        page.select_option("#b-agg", aggregate)
        if aggregate != "COUNT":
            page.select_option("#b-col", "age")
        page.click("#b-apply")
        page.click("#estimate")
        expect(page.locator("#message")).to_contain_text("Estimated cost")
        expect(page.locator("#message")).not_to_have_class("error")

    page.select_option("#b-agg", "QUANTILE")
    page.select_option("#b-col", "income")
    page.fill("#b-p", "0.9")
    page.check("#b-groups input[value=sex]")
    page.select_option("#b-fcol", "region")
    page.select_option("#b-fop", "<>")
    page.fill("#b-fval", "north")
    page.click("#b-apply")
    sql = (
        "SELECT sex, QUANTILE(income, 0.9) AS q90_income FROM people "
        "WHERE region <> 'north' GROUP BY sex"
    )
    expect(page.locator("#sql")).to_have_value(sql)
    page.fill("#epsilon", "0.2")
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Released")
    expect(page.locator("#result tbody tr")).to_have_count(2)
    # The run refreshed the page; the menus still hold the choices.
    expect(page.locator("#b-agg")).to_have_value("QUANTILE")
    expect(page.locator("#b-col")).to_have_value("income")
    expect(page.locator("#b-p")).to_have_value("0.9")
    expect(page.locator("#b-groups input[value=sex]")).to_be_checked()
    expect(page.locator("#b-fcol")).to_have_value("region")
    expect(page.locator("#b-fval")).to_have_value("north")


def test_histogram_chart_has_axes_labels_and_the_ci_level(console: Console, page: Page) -> None:
    sign_in(page, console, console.analyst, "alice (analyst)")
    run(page, GROUPED, "0.2")
    chart = page.locator("#result svg")
    expect(chart.locator("text.axis-title")).to_have_text(["region", "count_rows"])
    expect(chart.locator("text.label")).to_have_text(["north", "south", "east", "west"])
    assert chart.locator("text.tick").count() >= 3
    expect(chart.locator("line.cap")).to_have_count(8)
    expect(page.locator("#result .chart-note")).to_contain_text("95% confidence intervals")
    expect(page.locator("#result thead")).to_contain_text("95% CI")
    expect(page.locator("#result .release-note")).to_contain_text("95% confidence intervals")

    page.select_option("#b-agg", "HISTOGRAM")
    page.select_option("#b-col", "age")
    expect(page.locator("#b-upper")).to_have_value("100")  # the column's declared bounds
    page.fill("#b-bins", "5")
    page.click("#b-apply")
    page.fill("#epsilon", "0.2")
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Released")
    expect(chart.locator("rect.bar")).to_have_count(5)
    expect(chart.locator("line.whisker")).to_have_count(5)
    expect(chart.locator("text.axis-title")).to_have_text(["hist_age (bins)", "count"])
    page.screenshot(path=str(ARTIFACTS / "console-histogram.png"), full_page=True)


def test_estimate_shows_cost_and_ci_halfwidth_before_spending(console: Console, page: Page) -> None:
    sign_in(page, console, console.analyst, "alice (analyst)")
    expected = console.analyst_client.post(
        "/v1/datasets/people/queries:estimate", json={"sql": GROUPED, "epsilon": 0.5}
    ).json()["estimate"]["ci_halfwidths"]["count_rows"]
    page.fill("#sql", GROUPED)
    page.fill("#epsilon", "0.5")
    page.click("#estimate")
    expect(page.locator("#message")).to_contain_text("Estimated cost: ε 0.5")
    panel = page.locator("#estimate-panel")
    expect(panel.locator("th").nth(1)).to_have_text("expected 95% CI half-width")
    expect(panel.locator("tbody tr")).to_have_text([re.compile(rf"count_rows\s*± {expected:g}")])
    expect(page.locator("#budget")).to_contain_text("ε 1 of 1 left")


def test_reopen_from_history_and_download_csv(console: Console, page: Page) -> None:
    sign_in(page, console, console.analyst, "alice (analyst)")
    run(page, GROUPED, "0.25")
    expect(page.locator("#result tbody tr")).to_have_count(4)
    first = page.locator("#result tbody td.num").all_inner_texts()
    run(page, "SELECT COUNT(*) AS n FROM people", "0.25")
    expect(page.locator("#result tbody tr")).to_have_count(1)
    expect(page.locator("#history tbody tr")).to_have_count(2)

    page.locator("#history tbody tr").nth(1).locator("button.open").click()  # oldest is last
    expect(page.locator("#result .result-caption")).to_contain_text("History #1")
    expect(page.locator("#result .release-sql")).to_have_text(GROUPED)
    expect(page.locator("#result tbody tr")).to_have_count(4)
    assert page.locator("#result tbody td.num").all_inner_texts() == first
    expect(page.locator("#budget")).to_contain_text("ε 0.5 of 1 left")  # reopening is free

    with page.expect_download() as info:
        page.click("#result button.download-csv")
    path = info.value.path()
    assert info.value.suggested_filename == "people-1.csv"
    rows = list(csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    assert rows[0] == [
        "region",
        "count_rows",
        "count_rows_ci_low",
        "count_rows_ci_high",
        "ci_level",
    ]
    assert [r[0] for r in rows[1:]] == ["north", "south", "east", "west"]
    assert all(r[4] == "0.95" and float(r[2]) <= float(r[1]) <= float(r[3]) for r in rows[1:])
    shown = [line.split("\n")[0] for line in first]
    assert [f"{float(r[1]):g}" for r in rows[1:]] == shown


def test_owner_history_names_analysts_and_renders_batches(console: Console, page: Page) -> None:
    console.analyst_client.post(
        "/v1/datasets/people/queries", json={"sql": GROUPED, "epsilon": 0.1}
    ).raise_for_status()
    batch = [
        "SELECT COUNT(*) AS n FROM people",
        "SELECT sex, AVG(age) AS a FROM people GROUP BY sex",
    ]
    console.owner_client.post(
        "/v1/datasets/people/releases",
        json={"name": "yearly", "queries": [{"sql": q, "epsilon": 0.1} for q in batch]},
    ).raise_for_status()
    sign_in(page, console, console.owner, "owner (owner)")
    history = page.locator("#history")
    expect(history.locator("thead th").nth(2)).to_have_text("analyst")
    rows = history.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td").nth(2)).to_have_text("owner")  # the batch, newest first
    expect(rows.nth(1).locator("td").nth(2)).to_have_text("alice")
    expect(rows.nth(0).locator("ol.batch li")).to_have_text(batch)
    expect(history).not_to_contain_text('["SELECT')
    expect(page.locator("#app")).not_to_contain_text("Invalid Date")  # offset-aware timestamps

    rows.nth(0).locator("button.open").click()
    expect(page.locator("#result .release")).to_have_count(2)
    expect(page.locator("#result .release-sql")).to_have_text(batch)
    expect(page.locator("#result .release").nth(1).locator("tbody tr")).to_have_count(2)
    page.screenshot(path=str(ARTIFACTS / "console-owner-history.png"), full_page=True)
