"""The documentation's Python examples run as written (documentation that cannot rot silently):
the README's blocks one by one, and each page of the site (docs/*.md) in order in one namespace,
the HTTP API page against a demo curator served in-process. Every example prints what it shows.
(The site itself is built with ``mkdocs build --strict``, which checks its links, in make test.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dpcurator.service.app import create_app
from dpcurator.service.server import DEMO_DIR, bootstrap, build_service
from tests.conftest import REPO_ROOT
from tests.service_fixtures import ThreadServer, cheap_hasher

BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
README_BLOCKS = BLOCK.findall((REPO_ROOT / "README.md").read_text())
PAGES = sorted(p for p in (REPO_ROOT / "docs").glob("*.md") if BLOCK.search(p.read_text()))
#: pandas' mark of a frame printed with rows or columns left out ("[2 rows x 10 columns]").
TRUNCATED = re.compile(r"\[\d+ rows x \d+ columns\]")


def nav_pages(nav: object) -> list[str]:
    """Every page file of an mkdocs ``nav`` (nested sections included)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def test_readme_has_examples() -> None:
    assert len(README_BLOCKS) >= 2


@pytest.mark.parametrize("block", README_BLOCKS, ids=lambda b: b.splitlines()[0][:40])
def test_readme_example_runs(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block, "README.md", "exec"), {})  # our own documentation, run as written
    out = capsys.readouterr().out
    assert out  # every example prints what it shows
    assert not TRUNCATED.search(out), f"README prints a truncated frame:\n{out}"


def test_index_lists_every_page_of_the_site() -> None:
    """docs/index.md is the map of the site: it links every page of the mkdocs nav."""
    nav = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"]
    index = (REPO_ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", index))
    missing = [page for page in nav_pages(nav) if page != "index.md" and page not in linked]
    assert not missing, f"docs/index.md does not link these pages of the nav: {missing}"


def test_every_page_that_teaches_code_has_examples() -> None:
    assert {p.name for p in PAGES} >= {
        "getting-started.md",
        "metadata.md",
        "sql.md",
        "epsilon.md",
        "http-api.md",
        "estimators.md",
        "hypothesis-tests.md",
        "streams.md",
        "mining.md",
        "pmw.md",
    }


@pytest.fixture(scope="module")
def demo_curator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``dpcurator serve --demo`` in-process: the environment the API examples read (started
    before any test captures output, since the server logs to the stderr of its start)."""
    ledger = tmp_path_factory.mktemp("docs") / "ledger.sqlite3"
    service = build_service(f"sqlite:///{ledger}", hasher=cheap_hasher(), data_root=DEMO_DIR)
    started = bootstrap(service, demo=True)
    assert started.owner_token is not None
    assert started.analyst_token is not None
    with ThreadServer(create_app(service)) as server:
        yield {
            "DPCURATOR_URL": server.url,
            "DPCURATOR_TOKEN": started.analyst_token,
            "DPCURATOR_OWNER_TOKEN": started.owner_token,
        }
    service.close()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run_and_print(
    page: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    demo_curator: dict[str, str],
) -> None:
    text = page.read_text()
    for name, value in demo_curator.items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, object] = {}
    for number, block in enumerate(BLOCK.findall(text), 1):
        where = f"{page.name}, example {number}"
        exec(compile(block, where, "exec"), namespace)  # our own documentation, run as written
        out = capsys.readouterr().out
        assert out, f"{where} prints nothing"
        assert not TRUNCATED.search(out), f"{where} prints a truncated frame:\n{out}"
