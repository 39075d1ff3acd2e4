"""One writer per field of a run: only ``run/_context.py`` changes a :class:`RunContext`
(its fields are declared, set up and read in ``run/_context_fields.py``).

The steps return what they decided (the next step) and the driver applies it; everything
else a step or the driver changes goes through the context's verbs (as only a
``concurrent.futures.Future``'s methods change its state). The rule is checked on the
source: no module of the package but ``run/_context.py`` assigns to an attribute of a run's
context (``ctx.x = ...``, ``ctx.x += ...``, ``ctx.x[k] = ...``, ``del ctx.x``,
``setattr(ctx, ...)``) or changes one of its containers in place (``ctx.steps.append``);
the history (``ctx.messages``) is the one exception: it is the agent's conversation, which
the history rules (``_history``) extend in place. A context is any name annotated
``RunContext``, any ``self._ctx``, and any name bound to one of those.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from agent_sync.run._context import RunContext

PACKAGE = Path(__file__).resolve().parents[2] / "agent_sync"
OWNER = PACKAGE / "run" / "_context.py"

_MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "update",
        "setdefault",
        "popitem",
        "sort",
        "reverse",
        "add",
        "discard",
    }
)
_IN_PLACE = frozenset({"messages"})  # the agent's history: the history rules extend it


def _is_context_annotation(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split("[")[0].strip() == "RunContext"
    if isinstance(node, ast.Name):
        return node.id == "RunContext"
    if isinstance(node, ast.Attribute):
        return node.attr == "RunContext"
    return False


class _Writes(ast.NodeVisitor):
    """Every write to a run context's attribute in one module (line, what)."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self._names: list[set[str]] = [set()]  # names bound to a context, per function

    def _is_context(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return any(node.id in names for names in self._names)
        return isinstance(node, ast.Attribute) and node.attr == "_ctx"

    def _field(self, node: ast.expr) -> str | None:
        """``ctx.x`` (or ``ctx.x[k]``): the field written, else ``None``."""
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute) and self._is_context(node.value):
            return node.attr
        return None

    def _target(self, target: ast.expr, line: int) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element, line)
            return
        if isinstance(target, ast.Starred):
            self._target(target.value, line)
            return
        field = self._field(target)
        if field is not None:
            self.found.append((line, f"assigns ctx.{field}"))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        every += [a for a in (args.vararg, args.kwarg) if a is not None]
        self._names.append({a.arg for a in every if _is_context_annotation(a.annotation)})
        self.generic_visit(node)
        self._names.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node.lineno)
            if isinstance(target, ast.Name) and self._is_context(node.value):
                self._names[-1].add(target.id)  # an alias: ctx = self._ctx
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, node.lineno)
        if isinstance(node.target, ast.Name) and _is_context_annotation(node.annotation):
            self._names[-1].add(node.target.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, node.lineno)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        if self._is_context(node.value):
            self._names[-1].add(node.target.id)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            if self._is_context(node.args[0]):
                self.found.append((node.lineno, f"{func.id} on a context"))
        if isinstance(func, ast.Attribute) and func.attr in _MUTATORS:
            field = self._field(func.value)
            if field is not None and field not in _IN_PLACE:
                self.found.append((node.lineno, f"ctx.{field}.{func.attr}(...)"))
        self.generic_visit(node)


def writes(source: str) -> list[tuple[int, str]]:
    """The writes to a run context's fields in ``source`` (line, what)."""
    visitor = _Writes()
    visitor.visit(ast.parse(source))
    return visitor.found


def test_only_the_context_module_writes_a_run_context() -> None:
    problems = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != OWNER
        for line, what in writes(path.read_text(encoding="utf-8"))
    ]
    assert problems == [], "use a RunContext verb instead:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "body",
    [
        "ctx.next_step = 'model'",
        "ctx.cycle += 1",
        "ctx.round_results[key] = result",
        "ctx.round_results, ctx.subruns = {}, {}",
        "ctx.steps.append(step)",
        "del ctx.result",
        "setattr(ctx, 'status', 'running')",
        "other = ctx\n    other.status = 'running'",
        "self._ctx.commit_pause = commit",
        "ctx = self._ctx\n    ctx.status = 'running'",
    ],
)
def test_the_check_sees_each_way_of_writing(body: str) -> None:
    source = textwrap.dedent(
        """
        def step(self, ctx: RunContext, key, result, step, commit):
            {body}
        """
    ).format(body=body)
    assert writes(source), source


@pytest.mark.parametrize(
    "body",
    [
        "ctx.messages.append(message)",  # the history, extended in place by its rules
        "ctx.go_to('model')",
        "value = ctx.status",
        "ctx.inbox.take()",
    ],
)
def test_the_check_lets_verbs_and_reads_through(body: str) -> None:
    source = f"def step(ctx: 'RunContext', message):\n    {body}\n"
    assert writes(source) == []


def test_a_context_refuses_a_write_from_outside() -> None:
    """The same rule at run time: the fields are private, read through properties."""
    for name in ("status", "next_step", "phase", "cycle", "result", "settings", "messages"):
        view = inspect.getattr_static(RunContext, name)
        assert isinstance(view, property) and view.fset is None, name
    assert RunContext.__dictoffset__ == 0  # no instance dict to write a stray field into
