"""Every Python example in README.md and docs/**/*.md runs; the typed ones also type-check.

Blocks whose first line is ``# requires: ...`` (credentials, a web framework's project
setup) are shown, not run. A block whose first line is ``# setup: ...`` runs, and is also
run before each later block of the same page (helpers those examples share). A block that
reads ``REDIS_URL`` runs against the session's real ``redis-server`` (skipped locally when it
is not installed; CI installs it). Blocks that
iterate events with ``match event:`` are also checked with ``mypy --strict``, together
with ``tests/typing/``, so an ``AgentEvent`` that stops narrowing fails here (and in CI),
not in a user's editor.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
TYPING_CHECKS = sorted((ROOT / "tests" / "typing").glob("check_*.py"))


# OpenTelemetry's global providers can be set once per process, and once set every later
# run in the process is traced: an example that sets them would leave its tracer on for the
# rest of this test worker (a test that a plain run builds no hooks then failed, by order)
SETS_PROCESS_STATE = re.compile(r"\bset_(?:tracer|meter)_provider\(")


def _run_in_own_process(where: str, code: str) -> None:
    """Run an example that sets process-wide state in a Python process of its own."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=50,
    )  # fmt: skip
    assert done.returncode == 0, f"{where} failed:\n{done.stdout}{done.stderr}"


def examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        setup = ""
        for number, code in enumerate(BLOCK.findall(page.read_text()), start=1):
            if code.lstrip().startswith("# requires:"):
                continue
            found.append((f"{name}#{number}", setup + code))
            if code.lstrip().startswith("# setup:"):
                setup = code  # the page's later examples build on it
    return found


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _ in examples()])
def test_example_runs(
    where: str,
    code: str,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if "REDIS_URL" in code:
        monkeypatch.setenv("REDIS_URL", request.getfixturevalue("redis_server").url)
    if SETS_PROCESS_STATE.search(code):
        _run_in_own_process(where, code)
        return
    # dont_inherit: an example runs as written, not under this file's `from __future__ import
    # annotations` (its string annotations could not be resolved by pydantic or dataclasses:
    # the example's module is in no sys.modules)
    exec(compile(code, where, "exec", dont_inherit=True), {"__name__": "__doc_example__"})


def typed_examples() -> list[tuple[str, str]]:
    return [(where, code) for where, code in examples() if "match event:" in code]


def test_the_readme_shows_a_typed_match_over_events() -> None:
    assert any(where.startswith("README.md#") for where, _ in typed_examples())


@pytest.mark.timeout(300)  # a cold mypy cache on a loaded 2-core box
def test_event_examples_narrow_under_mypy_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]'); CI installs it")
    files = []
    for where, code in typed_examples():
        path = tmp_path / (re.sub(r"\W", "_", where) + ".py")
        path.write_text(code)
        files.append(str(path))
    assert files and TYPING_CHECKS
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--strict",
        # the options of the project's `mypy` (strict in pyproject), so its cache is reused:
        # the package is read from it and only these files are checked anew
        "--no-error-summary",
        *files,
        *map(str, TYPING_CHECKS),
    ]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout + out.stderr


def test_each_readme_quick_start_command_works_in_a_fresh_shell() -> None:
    # A fresh shell has no virtualenv active: each command creates (or reuses) and activates
    # .venv itself before pip or python runs, rather than relying on the one before it.
    # (Checked for real in `env -i` shells on fresh clones; this pins the rule.)
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("\n---\n", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", quick_start, re.S)
    assert len(commands) == 2
    for command in commands:
        lines = command.strip().splitlines()
        assert len(lines) == 1, command
        assert lines[0].startswith("python3 -m venv .venv && . .venv/bin/activate && pip install")


def test_every_docs_page_is_linked_from_the_index_the_nav_and_the_readme() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    nav = (ROOT / "mkdocs.yml").read_text()
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        name = page.relative_to(ROOT / "docs").as_posix()
        if name == "index.md":
            continue
        assert f"({name})" in index, f"docs/index.md does not link {name}"
        assert f": {name}" in nav, f"mkdocs.yml nav lacks {name}"
        assert f"][docs/{name}]" in readme, f"README's Documentation list lacks {name}"


def test_readme_links_work_on_pypi_and_name_files_that_exist() -> None:
    # PyPI shows README.md without the repository around it: a relative link is dead there.
    # Every link is absolute (reference-style, defined once at the end), and each one into the
    # repository names a path this checkout has, on the repository that pyproject names.
    readme = (ROOT / "README.md").read_text()
    source = re.search(r'^Source = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert source, "pyproject.toml's [project.urls] names no Source"
    inline = re.findall(r"\]\(([^)]+)\)", readme)
    assert [link for link in inline if not link.startswith(("https://", "#"))] == []
    prose = "".join(readme.split("```")[0::2])  # code blocks index lists: not links
    used = set(re.findall(r"\]\[([^\]]+)\]", prose))
    defined = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", readme, re.M))
    assert used and used <= set(defined), sorted(used - set(defined))
    for label, url in defined.items():
        assert url.startswith(source.group(1) + "/"), url
        path = re.sub(r"^/(blob|tree)/main/", "", url[len(source.group(1)) :])
        assert (ROOT / path).exists(), f"README links {label} to {path}, which does not exist"
