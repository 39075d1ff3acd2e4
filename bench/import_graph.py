"""The import graph of ``agent_sync`` between its parts, and whether it has a cycle.

    python bench/import_graph.py [--modules] [--package PATH]

A part is a subpackage (``agent_sync.run``, ``agent_sync.stores``, ...) or a top-level module
(``agent_sync.cancel``, ``agent_sync.messages``, ...). An edge ``A -> B`` means a module of
``A`` imports a module of ``B`` when it is imported: only imports that run at import time
count (a module's top level, including ``try``/``if`` blocks), not those under
``if TYPE_CHECKING:`` nor inside functions (they run later, once both sides are loaded). The
root ``agent_sync/__init__.py`` is the public facade that imports everything; it is not a
part, and an import of the root package (``from . import __version__``) is no edge.

Prints one line per part, in layers (a part imports only parts printed above it), then
``no cycle``; or, when the graph has a cycle, the cycle and the imports that make it, and
exits with status 1. ``--modules`` checks the graph of single modules as well (an edge from
a module to each module it imports, inside a part too). ``tests/test_import_graph.py`` runs
the same check.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "agent_sync"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


@dataclass(frozen=True, slots=True)
class Import:
    """One import that runs when its module is imported."""

    source: str
    """The importing module (``agent_sync.stores._sqlite``)."""
    target: str
    """The imported module (``agent_sync.run._state``)."""
    line: int
    """Its line in the source module."""


@dataclass(slots=True)
class Graph:
    """Edges between nodes, each edge with the imports that make it."""

    edges: dict[str, dict[str, list[Import]]] = field(default_factory=dict)

    def add(self, source: str, target: str, why: Import) -> None:
        """Add the edge ``source -> target`` (made by ``why``), and both nodes."""
        self.edges.setdefault(target, {})
        imports = self.edges.setdefault(source, {})
        if source != target and why not in imports.setdefault(target, []):
            imports[target].append(why)

    def find_cycle(self) -> list[str] | None:
        """A cycle as its nodes (the first repeated at the end), or ``None``."""
        state: dict[str, int] = {}  # absent: unseen, 1: on the current path, 2: done
        for start in sorted(self.edges):
            if start in state:
                continue
            path: list[str] = [start]
            state[start] = 1
            stack: list[Iterator[str]] = [iter(sorted(self.edges[start]))]
            while stack:
                following = next(stack[-1], None)
                if following is None:
                    state[path.pop()] = 2
                    stack.pop()
                elif state.get(following) == 1:
                    return path[path.index(following) :] + [following]
                elif following not in state:
                    state[following] = 1
                    path.append(following)
                    stack.append(iter(sorted(self.edges[following])))
        return None

    def layers(self) -> list[list[str]]:
        """The nodes in layers: each imports only nodes of the layers before it (no cycle)."""
        placed: dict[str, int] = {}
        remaining = set(self.edges)
        result: list[list[str]] = []
        while remaining:
            layer = sorted(n for n in remaining if all(t in placed for t in self.edges[n]))
            if not layer:
                raise ValueError("the graph has a cycle")
            for node in layer:
                placed[node] = len(result)
            remaining.difference_update(layer)
            result.append(layer)
        return result


def module_name(path: Path, root: Path = ROOT) -> str:
    """``agent_sync/stores/_sqlite.py`` -> ``agent_sync.stores._sqlite``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def import_time_imports(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[Import]:
    """The package's modules that ``name`` imports when it is imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    yield Import(name, _existing(alias.name, known), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, is_package, node.module, node.level)
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in known else _existing(base, known)
                yield Import(name, target, node.lineno)


def _top_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run at import time: not in functions nor TYPE_CHECKING."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _top_level(node.body)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _absolute(name: str, is_package: bool, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = name.split(".")
    if not is_package:
        parts.pop()
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def _existing(name: str, known: Mapping[str, Path]) -> str:
    """The longest prefix of ``name`` that is a module of the package."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def part_of(module: str) -> str:
    """The part a module belongs to: ``agent_sync.stores._sqlite`` -> ``agent_sync.stores``."""
    return ".".join(module.split(".")[:2])


def build(root: Path = ROOT, *, by_module: bool = False) -> Graph:
    """The import graph of the package at ``root``: between parts, or between modules."""
    known = modules(root)
    graph = Graph()
    for name, path in known.items():
        if name == PACKAGE:
            continue
        source = name if by_module else part_of(name)
        graph.edges.setdefault(source, {})
        for why in import_time_imports(name, path, known):
            if why.target == PACKAGE:
                continue
            graph.add(source, why.target if by_module else part_of(why.target), why)
    return graph


def describe(graph: Graph) -> list[str]:
    """One line per node, in layers, then ``no cycle``; or the cycle and what makes it."""
    cycle = graph.find_cycle()
    if cycle is None:
        lines = []
        for number, layer in enumerate(graph.layers()):
            for node in layer:
                targets = ", ".join(sorted(graph.edges[node])) or "(nothing of the package)"
                lines.append(f"[{number}] {node} -> {targets}")
        return [*lines, f"no cycle: {len(graph.edges)} nodes"]
    lines = ["CYCLE: " + " -> ".join(cycle)]
    for source, target in itertools.pairwise(cycle):
        for why in graph.edges[source][target]:
            lines.append(f"  {why.source}:{why.line} imports {why.target}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the graph; status 1 if it has a cycle."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--modules", action="store_true", help="check the graph of single modules too"
    )
    parser.add_argument(
        "--package", type=Path, default=ROOT, help="the package's directory (default: this one)"
    )
    args = parser.parse_args(argv)
    status = 0
    graphs = [("parts", build(args.package))]
    if args.modules:
        graphs.append(("modules", build(args.package, by_module=True)))
    for title, graph in graphs:
        print(f"# import graph of {PACKAGE} ({title}; import-time imports only)")
        for line in describe(graph):
            print(line)
        status = status or int(graph.find_cycle() is not None)
    return status


if __name__ == "__main__":
    sys.exit(main())
