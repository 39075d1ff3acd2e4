"""The import graph of ``agent_sync`` between its parts, and whether it has a cycle.

    python bench/import_graph.py [--modules] [--every-import] [--package PATH]

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

``--every-import`` counts every import instead: inside functions and under ``TYPE_CHECKING``
too, and an import of the root facade (``from .. import __version__``) as an edge to it. A
lazy import that climbs a layer is still a dependency: it decides what must be loaded, and
what a reader must know, before the part works. That mode prints every cycle (each strongly
connected set of parts, with the imports inside it) and every import that climbs above its
part's layer in :data:`LAYERS`.
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


def import_time_imports(
    name: str, path: Path, known: Mapping[str, Path], *, every: bool = False
) -> Iterator[Import]:
    """The package's modules that ``name`` imports when it is imported (``every``: that it
    imports anywhere, in functions and under ``TYPE_CHECKING`` too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    statements = (
        (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
        if every
        else _top_level(tree.body)
    )
    for node in statements:
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


def build(root: Path = ROOT, *, by_module: bool = False, every: bool = False) -> Graph:
    """The import graph of the package at ``root``: between parts, or between modules;
    ``every``: counting every import, the root facade a node of its own."""
    known = modules(root)
    graph = Graph()
    for name, path in known.items():
        if name == PACKAGE:
            continue
        source = name if by_module else part_of(name)
        graph.edges.setdefault(source, {})
        for why in import_time_imports(name, path, known, every=every):
            if why.target == PACKAGE and not every:
                continue
            graph.add(source, why.target if by_module else part_of(why.target), why)
    return graph


LAYERS: dict[str, int] = {
    **dict.fromkeys(
        ["_encodable", "_redact", "_signal_safe", "_deadlines", "_extras", "_version"], 0
    ),
    **dict.fromkeys(["_lazy", "errors", "_message_checks"], 1),
    **dict.fromkeys(["messages", "cancel", "_jsonschema"], 2),
    **dict.fromkeys(["events", "hooks", "result", "_decisions", "_prompt", "models"], 3),
    **dict.fromkeys(["output", "retry", "_limits", "_guardrails", "guardrails"], 3),
    **dict.fromkeys(["tools", "_run_state", "_tracing"], 4),
    **dict.fromkeys(["_history", "_repair"], 5),
    "stores": 6,
    "run": 7,
    **dict.fromkeys(["context", "_subagent", "_run_log"], 8),
    "_agent_runs": 9,
    "agent": 10,
    **dict.fromkeys(["web", "celery", "mcp"], 11),
    "testing": 12,
    "": 13,  # the root facade, which imports every public name
    "__main__": 14,  # the demo, on the public API
}
"""The layer of each part (``agent_sync.`` left out): a part may import only parts of lower
layers (or of its own, without a cycle). The stores find lost runs and hand them to the
agent through a verb they name by a ``Protocol`` (``stores._recovery.RecoveringAgent``);
the run log sits between the run and those who publish and follow it (the agent's
recovery, the web, Celery); the web, Celery and MCP (whose ``serve`` serves an agent; its
client tools import nothing above ``tools``) sit above the agent they drive."""


def layer_of(node: str) -> int | None:
    """``node``'s layer in :data:`LAYERS`, or ``None`` for a part the table does not know."""
    return LAYERS.get(node[len(PACKAGE) + 1 :] if node != PACKAGE else "")


def cycles(graph: Graph) -> list[list[str]]:
    """Every set of nodes that import each other round a circle (strongly connected sets of
    two or more), each sorted, largest first (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph.edges[start]))))
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(graph.edges[target]))))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return sorted(found, key=lambda members: (-len(members), members))


def climbs(graph: Graph) -> list[Import]:
    """Every import from a part to a part of a higher layer (or one :data:`LAYERS` lacks)."""
    found = []
    for source, targets in sorted(graph.edges.items()):
        for target, imports in sorted(targets.items()):
            here, there = layer_of(source), layer_of(target)
            if here is None or there is None or there > here:
                found.extend(imports)
    return found


def describe_every(graph: Graph) -> list[str]:
    """The ``--every-import`` report: each cycle with its imports, each climbing import,
    then a count of both (``0 cycles, 0 climbing imports`` when the layers hold)."""
    lines = []
    loops = cycles(graph)
    for members in loops:
        lines.append(f"CYCLE of {len(members)} parts: " + " ".join(members))
        inside = set(members)
        for source in members:
            for target, imports in sorted(graph.edges[source].items()):
                if target in inside:
                    lines.extend(f"  {w.source}:{w.line} imports {w.target}" for w in imports)
    climbing = climbs(graph)
    for why in climbing:
        lines.append(
            f"CLIMB {why.source}:{why.line} imports {why.target} "
            f"(layer {layer_of(part_of(why.source))} -> {layer_of(part_of(why.target))})"
        )
    return [*lines, f"{len(loops)} cycles, {len(climbing)} climbing imports"]


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
        "--every-import",
        action="store_true",
        help="count imports in functions and under TYPE_CHECKING too; check the layers",
    )
    parser.add_argument(
        "--package", type=Path, default=ROOT, help="the package's directory (default: this one)"
    )
    args = parser.parse_args(argv)
    if args.every_import:
        graph = build(args.package, every=True)
        print(f"# import graph of {PACKAGE} (parts; every import, the layers of LAYERS)")
        report = describe_every(graph)
        print("\n".join(report))
        return int(not report[-1].startswith("0 cycles, 0 climbing"))
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
