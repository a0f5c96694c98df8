"""Architecture rules enforced by walking the source's import graph (docs/architecture.md).

1. Only ``dpcurator.random`` touches entropy (random, secrets, numpy.random, os.urandom).
2. Only ``dpcurator.mechanisms`` draws noise (imports ``dpcurator.random.samplers``); backends never
   import random, mechanisms or accounting.
3. Imports point downward only: a module never imports a module of a higher layer.
4. No function-local imports (a cycle means the layering is wrong); the one exception is the
   optional PySpark engine, imported lazily where it is used.
5. No import circles, type-level ones included (``tests/import_graph.py`` says which imports count:
   ``TYPE_CHECKING`` and function-local ones do; a package's ``__init__`` re-exporting a
   submodule's name is followed to that submodule).
6. Modules stay small: none over :data:`MAX_MODULE_LINES` lines (one job per module).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import circles, describe, import_graph

SRC = Path(__file__).resolve().parents[1] / "src" / "dpcurator"

LAYERS: list[tuple[str, int]] = [
    ("dpcurator.errors", 0),
    ("dpcurator._validation", 0),
    ("dpcurator._cache", 0),
    ("dpcurator.core", 1),
    ("dpcurator.random", 1),
    ("dpcurator.mechanisms", 2),
    ("dpcurator.accounting", 2),
    ("dpcurator.estimators", 3),
    ("dpcurator.query.ir", 3),
    ("dpcurator.query.schema", 3),
    ("dpcurator.query.columns", 3),
    ("dpcurator.query.frontend.builder", 3),
    ("dpcurator.query.frontend.row_expressions", 3),
    ("dpcurator.query.frontend.sql", 3),
    ("dpcurator.query.frontend.text", 3),
    ("dpcurator.query.frontend.expressions", 3),
    ("dpcurator.query.frontend.join", 3),
    ("dpcurator.query.public_tables", 3),
    ("dpcurator.query.privacy_unit", 3),
    ("dpcurator.query.release.core", 4),
    ("dpcurator.query.release.estimate", 4),
    ("dpcurator.query.backends", 3),
    ("dpcurator.query.plan.planner", 4),
    ("dpcurator.query.plan.outputs", 4),
    ("dpcurator.query.plan.request", 4),
    ("dpcurator.query.session", 4),
    ("dpcurator.query.caches", 4),
    ("dpcurator.query.plan.clipping", 4),
    ("dpcurator.query.release.clipping", 4),
    ("dpcurator.query.release.ratio_interval", 4),
    ("dpcurator.synth", 4),
    ("dpcurator.streams", 4),
    ("dpcurator.mining", 5),
    ("dpcurator.interactive", 5),
    ("dpcurator.service", 5),
    ("dpcurator.cli", 5),
    ("dpcurator.api", 6),
    ("dpcurator.demo", 1),
]
ENTROPY_MODULES = ("random", "secrets", "numpy.random")
#: Lazy imports allowed: the optional PySpark engine and matplotlib, and the PLD/RDP accountants
#: (they load dp_accounting, ~2.3 s, which a server worker does not need to start).
LAZY_IMPORT_ALLOWED = (
    "pyspark",
    "dpcurator.query.backends.spark",
    "matplotlib",
    "dpcurator.accounting.accountants_pld",
    "dpcurator.accounting.accountants_rdp",
)
#: The command-line entry point defers each command's imports so that ``dpcurator --help``
#: starts at once (tests/test_cli.py checks what importing it loads).
DEFERRED_IMPORTS_MODULES = (
    "dpcurator.cli.main",
    "dpcurator.cli.client_commands",
    "dpcurator.cli.fit",
    "dpcurator.cli.synth",
    "dpcurator.cli.streams",
    "dpcurator.cli.metadata_check",
    "dpcurator.service.client",
)


def layer_of(module: str) -> int | None:
    """The layer of a dpcurator module (None for package roots such as ``dpcurator``)."""
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(tree: ast.AST, module: str) -> list[tuple[str, ast.AST]]:
    """Absolute names imported anywhere in the tree, with the node that imports them."""
    found: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{base}" if base else package
            found.append((base, node))
            found.extend((f"{base}.{alias.name}", node) for alias in node.names)
    return found


SOURCES = sorted(SRC.rglob("*.py"))


def test_sources_found() -> None:
    assert len(SOURCES) > 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_respects_layering(path: Path) -> None:
    module = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    own_layer = layer_of(module)
    in_random = module.startswith("dpcurator.random")
    in_mechanisms = module.startswith("dpcurator.mechanisms")
    in_backends = module.startswith("dpcurator.query.backends")
    problems: list[str] = []
    for name, _node in imports_of(tree, module):
        if not in_random and (name in ENTROPY_MODULES or name.startswith("numpy.random")):
            problems.append(f"imports entropy source {name}")
        if name.startswith("dpcurator.random.samplers") and not (in_random or in_mechanisms):
            problems.append(f"draws noise outside mechanisms ({name})")
        if in_backends and name.startswith(
            ("dpcurator.random", "dpcurator.mechanisms", "dpcurator.accounting")
        ):
            problems.append(f"backend imports {name}")
        target = layer_of(name)
        if own_layer is not None and target is not None and target > own_layer:
            problems.append(f"layer {own_layer} imports {name} (layer {target})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "urandom" and not in_random:
            problems.append("calls os.urandom")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if module in DEFERRED_IMPORTS_MODULES:
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    names = [a.name for a in inner.names] + [getattr(inner, "module", "") or ""]
                    if not any(n.startswith(LAZY_IMPORT_ALLOWED) for n in names):
                        problems.append(f"function-local import in {node.name}()")
    assert not problems, f"{module}: " + "; ".join(sorted(set(problems)))


def test_rule_catches_a_violation(tmp_path: Path) -> None:
    """The walker must see an entropy import and an upward import (the test can fail)."""
    tree = ast.parse("import numpy.random\nfrom dpcurator.service import app\n")
    names = [name for name, _ in imports_of(tree, "dpcurator.core.numbers")]
    assert "numpy.random" in names
    assert layer_of("dpcurator.service.app") == 5 > (layer_of("dpcurator.core.numbers") or 0)


#: The declared facts of the privacy unit, read only where the unit is built or reported.
UNIT_FIELDS = ("max_rows_per_person", "max_groups_per_person", "neighbouring", "public_size")
#: The modules that may read them: the metadata itself, the privacy unit, and the owner's
#: metadata check (which reports the declared values against the data).
UNIT_READERS = (
    "dpcurator.query.schema",
    "dpcurator.query.privacy_unit",
    "dpcurator.query.metadata_check",
)


def _reads_unit_field(node: ast.AST) -> str | None:
    """The unit field a ``metadata.<field>`` (or ``*.metadata.<field>``) read names, if any."""
    if not isinstance(node, ast.Attribute) or node.attr not in UNIT_FIELDS:
        return None
    base = node.value
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    if node.attr.startswith("max_") or "meta" in name.lower():
        return node.attr
    return None


def test_only_the_privacy_unit_reads_the_contribution_bounds() -> None:
    """Sensitivity comes from one place (issue 29): no release path reads the declared relation
    or contribution bounds from the metadata; each asks ``metadata.unit``."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        module = module_name(path)
        if module in UNIT_READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            field = _reads_unit_field(node)
            if field is not None:
                offenders.append(f"{module}:{getattr(node, 'lineno', '?')} reads {field}")
    assert offenders == []


#: The most lines a module of ``src/`` may have (issue 25: a longer module holds two jobs).
MAX_MODULE_LINES = 500
#: Modules allowed over the limit, each with its reason (prefer none; the test fails once a
#: listed module is short, so the list cannot go stale).
LONG_MODULES: dict[str, str] = {}


def test_modules_are_small() -> None:
    """No module of ``src/`` is over :data:`MAX_MODULE_LINES` lines, except the listed ones."""
    long = {
        module_name(path): lines
        for path in SOURCES
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert {m: n for m, n in long.items() if m not in LONG_MODULES} == {}
    assert set(LONG_MODULES) <= set(long), "a listed module is short now: drop it from the list"


def _circle_report(root: Path) -> list[str]:
    graph = import_graph(root)
    return [describe(graph, component) for component in circles(graph)]


def test_no_import_circles() -> None:
    """No two modules of ``src/`` import each other, directly or through others (issue 25).

    Every import statement counts, including those under ``if TYPE_CHECKING:`` (a type-level
    circle is a design circle: the two modules cannot be understood, moved or tested apart) and
    function-local ones (deferring an import hides a circle, it does not break it). The rule for
    packages, which keeps the classic false circle out: ``pkg/__init__`` importing ``pkg.sub`` is
    an edge ``pkg -> pkg.sub``; ``pkg.sub`` importing a sibling as ``from pkg import sibling`` is
    an edge to ``pkg.sibling``, and ``from pkg import Name`` is an edge to the module that defines
    ``Name``, following ``__init__``'s re-exports, so ``pkg.sub -> pkg`` exists only when the name
    is defined in ``__init__`` itself. That every package's ``__init__`` runs before its
    submodules is Python's import order, not an edge.
    """
    report = _circle_report(SRC.parent)
    assert not report, "import circles:\n" + "\n".join(report)


def test_no_import_circles_in_benchmarks() -> None:
    """The benchmark scripts import each other by file name; they form no circle either."""
    report = _circle_report(SRC.parents[1] / "benchmarks")
    assert not report, "import circles:\n" + "\n".join(report)


def _write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_circle_rule_on_a_package(tmp_path: Path) -> None:
    """The rule the no-circle test relies on: a re-export through ``__init__`` is no circle, a
    type-level or function-local import that closes a loop is one."""
    clean = _write_tree(
        tmp_path / "clean",
        {
            "pkg/__init__.py": "from pkg.core import Thing\nfrom .other import use\n",
            "pkg/core.py": "class Thing: ...\n",
            "pkg/other.py": "from pkg import Thing\nfrom . import core\ndef use(): ...\n",
        },
    )
    assert _circle_report(clean) == []
    looped = _write_tree(
        tmp_path / "looped",
        {
            "pkg/__init__.py": "from pkg.core import Thing\nLIMIT = 3\n",
            "pkg/core.py": "from pkg import LIMIT\nclass Thing: ...\n",
            "pkg/a.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
            ),
            "pkg/b.py": "def f():\n    from .a import A\n",
        },
    )
    assert _circle_report(looped) == [
        "pkg (line 1) -> pkg.core (line 1) -> pkg",
        "pkg.a (line 3) -> pkg.b (line 2) -> pkg.a",
    ]
