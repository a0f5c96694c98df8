"""``pytest -n 2 --dist loadgroup`` keeps an ``xdist_group`` on one worker (tests/xdist_groups.py):
the Spark cluster's two modules share one cluster only if they share one worker, and the modules
using the local SparkSession one JVM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.xdist_groups import module_groups

CONFTEST = """
import pytest
from tests.xdist_groups import ModuleGroupScheduling, check_marks

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return ModuleGroupScheduling(config, log)

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    check_marks(config.rootpath, items)
"""


def test_the_spark_cluster_modules_are_one_group() -> None:
    groups = module_groups(REPO_ROOT)
    assert groups["tests/test_spark_cluster.py"] == "spark_cluster"
    assert groups["tests/test_spark_cluster_service.py"] == "spark_cluster"


def test_the_local_spark_modules_are_one_group() -> None:
    """Every module using the local SparkSession fixture (tests.backends_fixtures) is in the
    group "spark_local", and nothing else: each worker running one of them starts its own JVM."""
    using = {
        path.relative_to(REPO_ROOT).as_posix()
        for path in (REPO_ROOT / "tests").glob("test_*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("from tests.backends_fixtures import spark")
    }
    grouped = {path for path, group in module_groups(REPO_ROOT).items() if group == "spark_local"}
    assert "tests/test_backends_conformance.py" in using
    assert grouped == using


def _project(root: Path, *args: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    (root / "tests").mkdir()
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "tests" / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (root / "tests" / "test_a.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('i', range(8))\ndef test_single(i): pass\n"
        + extra,
        encoding="utf-8",
    )
    for name, count in (("test_y", 3), ("test_z", 3)):
        (root / "tests" / f"{name}.py").write_text(
            textwrap.dedent(f"""
            import pytest
            pytestmark = [pytest.mark.xdist_group("both")]
            @pytest.mark.parametrize("i", range({count}))
            def test_grouped(i): pass
            """),
            encoding="utf-8",
        )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # the runner's own
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_a_group_of_two_modules_runs_on_one_worker(tmp_path: Path) -> None:
    ran = _project(tmp_path, "-n", "2", "--dist", "loadgroup", "-v")
    assert ran.returncode == 0, ran.stdout[-3000:]
    workers = {
        worker
        for worker, module in re.findall(r"\[(gw\d)\] .*PASSED tests/(test_\w+)\.py", ran.stdout)
        if module in ("test_y", "test_z")
    }
    assert len(workers) == 1, ran.stdout[-3000:]


def test_a_group_mark_on_one_function_is_refused(tmp_path: Path) -> None:
    alone = "\n@pytest.mark.xdist_group('both')\ndef test_alone(): pass\n"
    ran = _project(tmp_path, "-n", "0", extra=alone)
    assert ran.returncode != 0
    assert "mark whole modules only" in ran.stdout + ran.stderr
