"""The console shows releases as statisticians read them (issue 28 item 5), in headless Chromium:
a two-way table as a crosstab with row and column shares, a histogram as rows with a bar chart, a
fit as a coefficient table with intervals and the box flag, quantiles with their intervals and
rank error, a replay without a contradictory cost, synthetic releases readable in History with a
preview, the owner's cap and grant editing, and a favicon (no 404). One server and one browser for
the module; each test signs in on a fresh page. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from dpcurator.service.app import create_app
from dpcurator.service.server import build_service
from tests.service_fixtures import PEOPLE_METADATA, ThreadServer, cheap_hasher
from tests.test_console_browser import ARGS, ARTIFACTS, CHROMIUM

#: One worker runs the module: its tests share one server and one signed-in page.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("console_views")]

METADATA = {
    "table": "people",
    "columns": {
        **PEOPLE_METADATA["columns"],  # type: ignore[dict-item]
        "employed": {"type": "int", "lower": 0, "upper": 1},
        "note": {"type": "string"},  # no public keys: no synthetic release can include it
    },
}
TWO_WAY = "SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region"
BINS = ["<20", "[20,40)", "[40,60)", "[60,80)", ">=80"]
#: More digits than any stated precision gives: five or more significant digits after the point
#: (leading zeros are not significant: a p-value of 0.02413 has four), or nine in a row.
RAW_FLOAT = re.compile(r"\.0*[1-9]\d{4,}|\d{9,}")


@dataclass
class Server:
    """The module's server: dataset ``people`` (cap ε 100, δ 1e-5, replay on), its owner and
    the analyst alice (ε 1)."""

    url: str
    owner: str
    owner_client: httpx.Client
    alice_id: str


def _write(path: Path, rows: int = 600) -> Path:
    regions = ["north", "south", "east", "west"]
    lines = ["age,sex,region,income,employed,note"]
    for i in range(rows):
        age = (i * 37) % 90 + 5
        lines.append(
            f"{age},{'FM'[i % 2]},{regions[(i // 3) % 4]},{(i * 7919) % 90000 + 1000},"
            f"{int(age > 40)},n{i % 7}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("console-views")
    service = build_service(f"sqlite:///{tmp / 'l.sqlite3'}", hasher=cheap_hasher(), data_root=tmp)
    _, owner = service.create_principal("owner", "owner")
    with ThreadServer(create_app(service)) as running:
        client = running.client(owner.token)
        client.post(
            "/v1/datasets",
            json={
                "id": "people",
                "source": {"path": str(_write(tmp / "people.csv"))},
                "metadata": METADATA,
                "cap_epsilon": 100,
                "cap_delta": 1e-5,
                "replay_enabled": True,
            },
        ).raise_for_status()
        alice = client.post("/v1/analysts", json={"name": "alice"}).json()["principal"]["id"]
        client.put(f"/v1/analysts/{alice}/grants/people", json={"epsilon": 1}).raise_for_status()
        yield Server(running.url, owner.token, client, alice)
    service.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page(browser: Browser, server: Server) -> Iterator[Page]:
    """One page for the module, signed in as the owner; the module fails on a script error or
    a 4xx/5xx answer to anything the page loads by itself (the favicon included)."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    faults: list[str] = []
    page.on("pageerror", lambda error: faults.append(str(error)))
    page.on(
        "response",
        lambda r: (
            faults.append(f"{r.status} {r.url}")
            if r.status >= 400 and r.request.resource_type != "fetch"
            else None
        ),
    )
    page.goto(f"{server.url}/")
    page.fill("#token", server.owner)
    page.click("#signin-form button")
    expect(page.locator("#whoami")).to_have_text("owner (owner)")
    expect(page.locator("#schema tbody tr")).to_have_count(6)
    yield page
    context.close()
    assert faults == []


def run(page: Page, sql: str, epsilon: str = "0.5", delta: str = "0") -> None:
    page.fill("#sql", sql)
    page.fill("#epsilon", epsilon)
    page.fill("#delta", delta)
    page.click("#run")
    expect(page.locator("#message")).to_contain_text("Released")


def shot(page: Page, name: str) -> None:
    """A full-page screenshot in test-artifacts/, checked to be a PNG of the page's width."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1100, width
    assert height >= 900, height


def percents(texts: list[str]) -> list[float]:
    return [float(t.split("%")[0]) for t in texts]


def test_two_way_table_is_a_crosstab_with_shares(page: Page) -> None:
    run(page, TWO_WAY)
    table = page.locator("#result table.crosstab")
    expect(table.locator("thead th")).to_have_text(
        [re.compile(r"^sex \\ region"), "north", "south", "east", "west", re.compile("^total")]
    )
    expect(table.locator("tbody th")).to_have_text(["F", "M", "total"])
    expect(table.locator("tbody td.num .ci").first).to_have_text(re.compile(r"^\[\d+, \d+\]$"))
    labels = [f"{s} / {r}" for s in "FM" for r in ("north", "south", "east", "west")]
    expect(page.locator("#result svg text.label")).to_have_text(labels)  # rows, in full
    rows = table.locator("tbody tr")
    cells = [
        [float(t.split("\n")[0]) for t in rows.nth(r).locator("td").all_inner_texts()]
        for r in range(3)
    ]
    for line in cells[:2]:  # the margins add the cells
        assert line[-1] == sum(line[:-1]), line
    assert cells[2] == [a + b for a, b in zip(cells[0], cells[1], strict=True)], cells

    page.select_option("#result select.crosstab-mode", "row shares")
    for row in range(2):
        shares = rows.nth(row).locator("td.share").all_inner_texts()
        assert abs(sum(percents(shares)) - 100) < 0.5, shares
        for text in shares:  # each share lies in its interval
            share, low, high = (float(x) for x in re.findall(r"([\d.]+)%", text))
            assert low <= share <= high, text
    expect(page.locator("#result .crosstab-view")).to_contain_text("Bonferroni over 4 cells")
    page.select_option("#result select.crosstab-mode", "column shares")
    north = percents([rows.nth(r).locator("td.share").first.inner_text() for r in (0, 1)])
    assert abs(sum(north) - 100) < 0.5, north
    expect(page.locator("#result .crosstab-view")).to_contain_text("Bonferroni over 2 cells")
    shot(page, "crosstab")


def test_histogram_is_rows_with_a_bar_chart(page: Page) -> None:
    run(page, "SELECT HISTOGRAM(age, 0, 100, 5) AS h FROM people")
    table = page.locator("#result table.histogram-table")
    expect(table.locator("tbody tr")).to_have_count(5)
    expect(table.locator("tbody tr td:first-child")).to_have_text(BINS)
    chart = page.locator("#result svg")
    expect(chart.locator("rect.bar")).to_have_count(5)
    expect(chart.locator("text.label")).to_have_text(BINS)
    boxes = [chart.locator("rect.bar").nth(i).bounding_box() for i in range(5)]
    assert all(b is not None for b in boxes)
    tops = [b["y"] for b in boxes if b is not None]
    assert tops == sorted(tops)  # one bar per row, top to bottom
    assert len(set(tops)) == 5
    shot(page, "histogram-rows")
    # Grouped: still one row per bin, a column per group, and a chart of the group picked.
    run(page, "SELECT sex, HISTOGRAM(age, 0, 100, 5) AS h FROM people GROUP BY sex")
    expect(table.locator("thead th")).to_have_text(["h (bins)", re.compile("^F"), re.compile("^M")])
    expect(table.locator("tbody tr")).to_have_count(5)
    expect(chart.locator("text.axis-title")).to_have_text(["h (bins)", "count (F)"])
    page.select_option("#result select.chart-column", "M")
    expect(chart.locator("text.axis-title")).to_have_text(["h (bins)", "count (M)"])


def test_fits_are_coefficient_tables_with_the_box_flag(page: Page) -> None:
    run(page, "SELECT REGRESS(income, age) FROM people", "0.5", "1e-6")
    table = page.locator("#result table.fit-table")
    expect(table.locator("tbody td:first-child")).to_have_text(["intercept", "age"])
    expect(table.locator("thead th")).to_have_count(4)  # no box: no flag column
    for row in table.locator("tbody tr").all():
        value, low, high = (float(t) for t in row.locator("td.num").all_inner_texts())
        assert low <= value <= high
    expect(page.locator("#result .fit-view")).to_contain_text("cover the noise and the sampling")
    # A box far too small for the data: the fit's terms sit on its edge, and the console says so.
    run(page, "SELECT LOGISTIC(employed, age, 0.001) FROM people", "1")
    flags = page.locator("#result table.fit-table tbody td:last-child")
    expect(page.locator("#result table.fit-table thead th").last).to_contain_text("at box bound")
    expect(flags.first).to_have_text(re.compile("^(yes|no)"))
    assert any(t.startswith("yes") for t in flags.all_inner_texts())
    expect(page.locator("#result .release-warning")).to_contain_text("at_box_bound")
    shot(page, "fit")


def test_quantiles_show_intervals_and_rank_error_rounded(page: Page) -> None:
    run(page, "SELECT QUANTILE(income, 0.9) AS q90, MEDIAN(age) AS m FROM people")
    table = page.locator("#result table.statistics-table")
    expect(table.locator("tbody td:first-child")).to_have_text(["q90", "m"])
    expect(table.locator("thead th").last).to_contain_text("rank error")
    for row in table.locator("tbody tr").all():
        cell = row.locator("td.num").first
        value = float(cell.inner_text().split("\n")[0])
        low, high = (float(x) for x in re.findall(r"-?[\d.]+", cell.locator(".ci").inner_text()))
        assert low <= value <= high
    expect(page.locator("#result .precision-note")).to_contain_text("two significant digits")
    assert not RAW_FLOAT.search(page.locator("#result").inner_text())


def test_replay_states_no_charge_without_a_cost(page: Page) -> None:
    sql = "SELECT region, COUNT(*) AS replayed_n FROM people GROUP BY region"
    run(page, sql)
    expect(page.locator("#message")).to_contain_text("cost ε 0.5")
    run(page, sql)
    expect(page.locator("#message")).to_have_text(re.compile("^Released from history: no charge"))
    expect(page.locator("#message")).not_to_contain_text("cost")
    note = page.locator("#result .release-note").first
    expect(note).to_contain_text("no charge now (first released for ε 0.5")
    expect(note).not_to_contain_text("; cost")


@pytest.fixture(scope="module")
def synthetic_id(server: Server) -> str:
    """An MWEM release of sex and age (40 rows) published by the owner through the API."""
    job = server.owner_client.post(
        "/v1/datasets/people/synthetic",
        json={"kind": "mwem", "epsilon": 1, "delta": 0, "columns": ["sex", "age"], "rows": 40},
    ).json()
    while job["status"] == "running":  # a few hundred ms; polled, not slept
        job = server.owner_client.get(f"/v1/synthetic/{job['id']}").json()
    assert job["status"] == "done"
    return str(job["id"])


def preview_button(page: Page, synthetic_id: str) -> Locator:
    """The preview button of one release in the Synthetic card's list."""
    return page.locator("#synthetic tbody tr", has_text=synthetic_id).locator("button.preview")


def test_synthetic_history_preview_and_dropped_column(page: Page, synthetic_id: str) -> None:
    expect(page.locator("#s-dropped")).to_contain_text("Not offered: note (no public keys")
    expect(page.locator("#s-columns input[value=note]")).to_have_count(0)
    page.reload()
    expect(page.locator("#history")).to_contain_text(
        f"Synthetic MWEM of sex, age, 40 rows, ε 1, δ 0 → {synthetic_id}"
    )
    expect(page.locator("#history")).not_to_contain_text('{"columns"')
    history_row = page.locator("#history tbody tr", has_text="Synthetic MWEM")
    history_row.locator("button.preview").click()  # History previews it too
    expect(page.locator("#s-preview h3")).to_have_text(f"Preview of {synthetic_id}")
    page.locator("#s-preview").evaluate("(node) => node.replaceChildren()")
    preview_button(page, synthetic_id).click()
    preview = page.locator("#s-preview")
    expect(preview.locator("table.preview-table tbody tr")).to_have_count(10)
    expect(preview.locator("table.preview-table thead th")).to_have_text(["sex", "age"])
    expect(preview.locator("h4")).to_have_text(["sex", "age"])
    expect(preview.locator(".preview-chart").nth(0).locator("rect.bar")).to_have_count(2)
    expect(preview.locator(".preview-chart").nth(1).locator("rect.bar")).to_have_count(10)
    counts = preview.locator(".preview-chart").nth(0).locator("rect.bar title").all_text_contents()
    assert sum(int(t.split(": ")[1]) for t in counts) == 40, counts
    shot(page, "synthetic-preview")


def test_owner_edits_the_cap_and_a_grant(page: Page, server: Server) -> None:
    expect(page.locator("#cap-epsilon")).to_have_value("100")
    page.fill("#cap-epsilon", "80")
    page.click("#cap button[type=submit]")
    expect(page.locator("#cap-message")).to_contain_text("Saved")
    expect(page.locator("#budget")).to_contain_text("of 80 left")
    assert server.owner_client.get("/v1/datasets/people").json()["cap"]["total"]["epsilon"] == 80

    row = page.locator("#grants tbody tr", has_text="alice")
    expect(row.locator("td").nth(1)).to_have_text("ε 1, δ 0")
    row.locator("button.edit-grant").click()
    expect(page.locator("#grant-analyst")).to_have_value(server.alice_id)
    expect(page.locator("#grant-epsilon")).to_have_value("1")
    page.fill("#grant-epsilon", "2.5")
    page.click("#grant button[type=submit]")
    message = page.locator("#grant-message")
    expect(message).to_contain_text("alice's budget on this dataset is now ε 2.5")
    expect(row.locator("td").nth(1)).to_have_text("ε 2.5, δ 0")
    page.fill("#grant-delta", "0.001")  # above the cap's δ: refused, named, nothing changed
    page.click("#grant button[type=submit]")
    expect(message).to_contain_text("Budget not changed: The grant's delta")
    expect(message).to_contain_text("more than the cap of dataset 'people' allows")
    expect(row.locator("td").nth(1)).to_have_text("ε 2.5, δ 0")
    audit = page.locator("#audit")
    expect(audit).to_contain_text("cap: (epsilon 80, delta 0.00001")
    details = audit.locator("tbody td:last-child").all_inner_texts()
    assert not any(re.search(r"\d/\d", d) for d in details), details  # no exact rationals
    shot(page, "owner-cap-grant")


def test_favicon_is_served(page: Page) -> None:
    icon = page.locator("link[rel=icon]")
    expect(icon).to_have_attribute("type", "image/svg+xml")
    status, kind, text = page.evaluate(
        """async () => {
            const r = await fetch(document.querySelector("link[rel=icon]").href);
            return [r.status, r.headers.get("content-type"), await r.text()];
        }"""
    )
    assert status == 200
    assert kind.startswith("image/svg+xml")
    assert text.startswith("<svg")


def test_phone_width_keeps_the_new_views_inside_the_window(page: Page, synthetic_id: str) -> None:
    """At 390 px wide the crosstab, the fit table and a synthetic preview scroll inside their
    cards; the page is never wider than the window."""
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        for sql in (TWO_WAY, "SELECT REGRESS(income, age) FROM people"):
            run(page, sql, "0.5", "1e-6")
            widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert widths[0] <= widths[1], (sql, widths)
        page.reload()  # the release list is read on sign-in, whichever test published it
        preview_button(page, synthetic_id).click()
        expect(page.locator("#s-preview .preview-chart svg").first).to_be_visible()
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], widths
    finally:
        page.set_viewport_size({"width": 1100, "height": 900})


def test_a_hypothesis_test_shows_its_report(page: Page) -> None:
    """A SQL test's release is its report (test, H0, statistic, p-value, estimate) and its
    released figures as rows, with no bar chart mixing a p-value with sums."""
    run(page, "SELECT TTEST(age, sex) FROM people")
    report = page.locator("#result table.test-report")
    expect(report.locator("thead th")).to_have_text(
        ["test", "H0", "statistic", "p-value", "estimate"]
    )
    expect(report.locator("tbody td").first).to_contain_text("t")
    p_value = report.locator("td.p-value").inner_text()
    assert p_value == "< 0.0001" or 0 <= float(p_value) <= 1, p_value
    figures = page.locator("#result table.test-figures tbody tr")
    expect(figures.first.locator("td").first).to_have_text("statistic")
    expect(page.locator("#result svg")).to_have_count(0)
    expect(page.locator("#result .release-note").last).to_contain_text("privacy noise")
    assert not RAW_FLOAT.search(page.locator("#result").inner_text())
    shot(page, "hypothesis-test")
