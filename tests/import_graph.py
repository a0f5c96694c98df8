"""The import graph of a source tree, read from the syntax alone (no module is executed).

``import_graph(root)`` maps every module under ``root`` (dotted name relative to ``root``; a
package is named by its folder, its ``__init__.py``) to the modules of the same tree it imports,
each with the line of the import. Every import statement counts: top-level ones, those under
``if TYPE_CHECKING:`` (a type-level circle is still a circle in the design) and function-local
ones (a deferred import hides a circle, it does not remove it).

How a statement becomes edges:

- ``import a.b.c`` is an edge to ``a.b.c`` (not to ``a`` or ``a.b``: that every module's parent
  packages run first is how Python works, not a dependency the module chose).
- ``from a.b import n`` is an edge to the submodule ``a.b.n`` when that file exists, otherwise to
  the module that *defines* ``n``: ``a.b`` itself, except that when ``a.b`` is a package whose
  ``__init__`` only re-exports ``n`` (``from .core import n``), the edge follows the re-export to
  the module that defines it. So ``pkg/__init__`` importing ``pkg.sub`` and ``pkg.sub`` importing
  a sibling through the package is no circle, while ``pkg.sub`` importing a name defined in
  ``pkg/__init__`` itself is an edge ``pkg.sub -> pkg`` and closes one.
- Relative imports are resolved against the importing module's package.
- Names outside the tree (the standard library, third-party packages) are no edges.

``circles(graph)`` returns the strongly connected components with more than one module (or a
module importing itself), each as a sorted list; ``describe(graph, component)`` names one concrete
loop through it with the lines that close it (and the component's other members).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

Graph = dict[str, dict[str, int]]


def module_files(root: Path) -> dict[str, Path]:
    """Every module under ``root`` by dotted name (a package by its folder's name)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts:
            found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    """The package a relative import in ``module`` starts from."""
    if path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def _resolve_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = _package_of(module, path)
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


class _Tree:
    def __init__(self, root: Path) -> None:
        self.files = module_files(root)
        self.trees = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in self.files.items()}
        self._reexports: dict[str, dict[str, str]] = {}

    def is_package(self, module: str) -> bool:
        return self.files[module].name == "__init__.py"

    def known_prefix(self, name: str) -> str | None:
        """The longest prefix of ``name`` that is a module of the tree."""
        while name:
            if name in self.files:
                return name
            name = name.rpartition(".")[0]
        return None

    def reexports(self, package: str) -> dict[str, str]:
        """The names a package's ``__init__`` binds by importing them: name -> absolute source."""
        if package not in self._reexports:
            bound: dict[str, str] = {}
            for node in _statements(self.trees[package]):
                if isinstance(node, ast.ImportFrom):
                    base = _resolve_base(package, self.files[package], node)
                    for alias in node.names:
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
            self._reexports[package] = bound
        return self._reexports[package]

    def defining_module(self, base: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module whose ``name`` a ``from base import name`` reads."""
        if f"{base}.{name}" in self.files:
            return f"{base}.{name}"
        if base in seen or not self.is_package(base):
            return base
        source = self.reexports(base).get(name)
        if source is None:
            return base
        source_base, _, source_name = source.rpartition(".")
        if source_base not in self.files:
            return base
        return self.defining_module(source_base, source_name, seen | {base})

    def edges(self, module: str) -> dict[str, int]:
        path = self.files[module]
        out: dict[str, int] = {}

        def add(target: str | None, line: int) -> None:
            if target is not None and target not in out:
                out[target] = line

        for node in _statements(self.trees[module]):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(self.known_prefix(alias.name), node.lineno)
                continue
            base = _resolve_base(module, path, node)
            if base not in self.files:
                add(self.known_prefix(base), node.lineno)
                continue
            for alias in node.names:
                if alias.name == "*":
                    add(base, node.lineno)
                else:
                    add(self.defining_module(base, alias.name), node.lineno)
        return out


def import_graph(root: Path) -> Graph:
    """Module -> {imported module of the same tree: line of the first import}."""
    tree = _Tree(root)
    return {module: tree.edges(module) for module in tree.files}


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components that form a loop (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return sorted(found)


def describe(graph: Graph, component: list[str]) -> str:
    """One loop through a component, e.g. ``a (line 3) -> b (line 9) -> a``."""
    members = set(component)
    start = component[0]
    # Breadth-first search from start back to start, inside the component.
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in previous:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child in members and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    path = [start]
    node = previous[start]
    while node != start:
        path.append(node)
        node = previous[node]
    path.append(start)
    path.reverse()
    hops = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(path)]
    loop = " -> ".join([*hops, start])
    rest = sorted(members - set(path))
    return f"{loop}; also in this circle: {', '.join(rest)}" if rest else loop
