"""The README's Python examples run as written (documentation that cannot rot silently)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
README_BLOCKS = BLOCK.findall((REPO_ROOT / "README.md").read_text())


def test_readme_has_examples() -> None:
    assert len(README_BLOCKS) >= 2


@pytest.mark.parametrize("block", README_BLOCKS, ids=lambda b: b.splitlines()[0][:40])
def test_readme_example_runs(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block, "README.md", "exec"), {})  # our own documentation, run as written
    assert capsys.readouterr().out  # every example prints what it shows
