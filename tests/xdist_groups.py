"""``xdist_group`` under ``pytest -n 2 --dist loadgroup`` with pytest 9.2's structured node ids.

pytest-xdist 3.8 groups tests by appending ``@group`` to each grouped item's node id in the
worker (``item._nodeid``); pytest 9.2 builds the node id from a structured id instead, so the
suffix is lost and every grouped test is scheduled on its own (pytest-dev/pytest-xdist#1386).
The Spark cluster's tests then ran on both workers, each starting its own cluster and drivers.

Here the controller reads the groups from the test modules' source: a module whose module-level
``pytestmark`` holds ``pytest.mark.xdist_group("name")`` is one work unit of that name (modules
of the same name share one). :func:`check_marks` makes sure in each worker that every
``xdist_group`` mark of the collected items is such a module-level one, so the controller's
reading and the marks cannot drift apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from xdist.scheduler import LoadGroupScheduling


def module_groups(rootpath: Path) -> dict[str, str]:
    """Each test module's group, by its node id path (``tests/test_x.py``), for the modules
    whose module-level ``pytestmark`` holds an ``xdist_group`` mark."""
    groups = {}
    for path in sorted((rootpath / "tests").glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            ):
                continue
            for call in ast.walk(node.value):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "xdist_group"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                ):
                    groups[path.relative_to(rootpath).as_posix()] = str(call.args[0].value)
    return groups


class ModuleGroupScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` with the groups of :func:`module_groups` (the largest work unit, the
    Spark cluster's tests, is handed out first, as xdist orders units by their size)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self.groups = module_groups(config.rootpath)

    def _split_scope(self, nodeid: str) -> str:
        group = self.groups.get(nodeid.split("::", 1)[0])
        return group if group is not None else super()._split_scope(nodeid)


def check_marks(rootpath: Path, items: list[pytest.Item]) -> None:
    """Refuse a run whose ``xdist_group`` marks differ from the modules' ``pytestmark`` ones."""
    groups = module_groups(rootpath)
    for item in items:
        marked = {str(mark.args[0]) for mark in item.iter_markers("xdist_group") if mark.args}
        read = groups.get(item.nodeid.split("::", 1)[0].split("@", 1)[0])
        if marked != ({read} if read else set()):
            raise pytest.UsageError(
                f"{item.nodeid}: xdist_group marks {sorted(marked)} but its module's pytestmark "
                f"gives {read!r}; mark whole modules only (module-level pytestmark), see "
                "tests/xdist_groups.py"
            )
