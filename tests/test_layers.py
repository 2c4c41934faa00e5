"""The layering of DESIGN: imports point down, between packages and between orchestrator's rooms,
no module imports itself back through others, and only ``db/`` speaks SQL (import statements
read, nothing imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "workers", "search_spaces", "db")
#: Which of our packages each package may import.
MAY_IMPORT = {
    "db": set(),
    "search_spaces": set(),
    "workers": {"search_spaces"},
    "orchestrator": {"workers", "search_spaces", "db"},
}
#: The SQL libraries and drivers: only db/ imports them.
SQL_LIBRARIES = frozenset({"sqlalchemy", "alembic", "sqlite3", "psycopg", "psycopg2"})
#: Methods that send a statement (a session's, a connection's, a cursor's): only db/ calls them.
SQL_CALLS = frozenset({"execute", "executemany", "exec_driver_sql", "scalar", "scalars"})
#: The modules of db/ that code outside it may import: the package (its lazy names: Database,
#: Session, the states, records, errors), the repository's public surface, errors and states;
#: never the models (no query is built outside db/), sessions' internals or migrations.
DB_DOOR = frozenset({"db", "db.repository", "db.errors", "db.states"})
#: orchestrator's rooms, lowest first: a room imports its own and lower rooms only (the top-level
#: modules, errors and output, are the floor every room stands on).
ROOMS = {"": 0, "study": 1, "run": 2, "export": 3, "app": 4, "server": 5, "commands": 6}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> Iterator[str]:
    """Every module of ours ``path`` names in an import statement, at any depth."""
    yield from (n for n in _named(path.read_text(), path, module) if n.split(".")[0] in PACKAGES)


def _named(source: str, path: Path, module: str) -> Iterator[str]:
    """Every name an import statement of ``source`` (the text of ``path``, module ``module``)
    names, at any depth (under ``if TYPE_CHECKING:`` and inside functions too): each imported
    module, and for ``from M import a`` both ``M`` and ``M.a``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        yield from names


def _files() -> dict[str, Path]:
    """Our modules (migrations aside) and their files."""
    return {
        _module(p): p
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if "migrations" not in p.parts
    }


FILES = _files()


def _graph() -> dict[str, set[str]]:
    files = FILES
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        graph[module] = {
            name for name in _imports(path, module) if name in files and name != module
        }
    return graph


GRAPH = _graph()


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOMS) else ""


def test_packages_import_only_the_packages_below_them() -> None:
    wrong = sorted(
        f"{module} -> {name}"
        for module, names in GRAPH.items()
        for name in names
        if name.split(".")[0] != module.split(".")[0]
        and name.split(".")[0] not in MAY_IMPORT[module.split(".")[0]]
    )
    assert not wrong


def test_orchestrator_rooms_import_down_only() -> None:
    wrong = sorted(
        f"{module} -> {name}"
        for module, names in GRAPH.items()
        if module.startswith("orchestrator.") and module != "orchestrator.__main__"
        for name in names
        if name.startswith("orchestrator.") and ROOMS[_room(name)] > ROOMS[_room(module)]
    )
    assert not wrong


def test_orchestrator_has_no_loose_modules_but_its_floor() -> None:
    loose = {p.stem for p in (ROOT / "orchestrator").glob("*.py")}
    assert loose <= {"__init__", "__main__", "errors", "output"}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    # A package's __init__ naming its own modules is not a cycle between modules.
    graph = {m: {n for n in names if not m.startswith(n + ".")} for m, names in GRAPH.items()}
    assert _cycles(graph) == []


@pytest.mark.parametrize("graph", [{"a": {"b"}, "b": {"a"}, "c": set()}])
def test_the_cycle_check_finds_a_cycle(graph: dict[str, set[str]]) -> None:
    assert _cycles(graph) == [["a", "b"]]


def _sql_outside_db(module: str, names: Iterator[str]) -> list[str]:
    """What ``module``'s imports (``names``) break of "only db/ speaks SQL": a SQL library, or a
    module of db/ beyond :data:`DB_DOOR` (db's models, its session internals, a repository
    module instead of the repository's surface). Nothing, for a module of db/."""
    if module.split(".")[0] == "db":
        return []
    db_modules = {m for m in FILES if m.split(".")[0] == "db"} | {"db.migrations"}
    return sorted(
        f"{module} -> {name}"
        for name in set(names)
        if name.split(".")[0] in SQL_LIBRARIES or (name in db_modules and name not in DB_DOOR)
    )


def _statements_sent(module: str, source: str) -> list[str]:
    """The calls of ``source`` (module ``module``, outside db/) to a method that sends SQL."""
    if module.split(".")[0] == "db":
        return []
    return sorted(
        f"{module}:{node.lineno} .{node.func.attr}()"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SQL_CALLS
    )


def test_only_db_speaks_sql() -> None:
    """No module outside db/ imports SQLAlchemy (or Alembic, or a driver), not even for a type,
    nor db's models, nor sends a statement: every query is a repository function, and the
    session's type is ``db.Session``."""
    wrong = [
        line
        for module, path in FILES.items()
        for line in [
            *_sql_outside_db(module, _named(path.read_text(), path, module)),
            *_statements_sent(module, path.read_text()),
        ]
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "source",
    [
        "import sqlalchemy",
        "import sqlalchemy as sa",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sqlalchemy.orm import Session",
        "def f():\n    from sqlalchemy import select",
        "from db.models import Trial",
        "from db import models",
        "from db.repository.trials import VERDICT",
        "import alembic",
        "import sqlite3",
    ],
)
def test_the_sql_check_finds_sql_outside_db(source: str) -> None:
    path = ROOT / "orchestrator" / "app" / "sneaky.py"
    assert _sql_outside_db(
        "orchestrator.app.sneaky", _named(source, path, "orchestrator.app.sneaky")
    )


@pytest.mark.parametrize(
    "source",
    [
        "s.execute(query)",
        "s.connection().exec_driver_sql('DELETE FROM tf_jobs')",
        "def f(s):\n    return s.scalar(q)",
    ],
)
def test_the_sql_check_finds_a_statement_sent_outside_db(source: str) -> None:
    assert _statements_sent("orchestrator.run.sneaky", source)
    assert _statements_sent("db.repository.jobs", source) == []


@pytest.mark.parametrize(
    "source",
    [
        "from db import Database, Session, repository, utcnow",
        "from db.repository import TrialRecord",
        "from db.errors import NotFound",
        "from db.states import JobStatus",
    ],
)
def test_the_sql_check_lets_the_door_through(source: str) -> None:
    path = ROOT / "orchestrator" / "app" / "fine.py"
    assert (
        _sql_outside_db("orchestrator.app.fine", _named(source, path, "orchestrator.app.fine"))
        == []
    )
