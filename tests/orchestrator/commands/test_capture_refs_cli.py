"""The CLI on captured references (hand-written captures, SQLite, no tuning): `capture --refs`
prints the same reference for two directories of one kernel; `best` and `pull` take it; paths and
malformed references are refused in one line, exit 2; a second `pull` into the folder merges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from db import Database, repository
from orchestrator.commands.cli import main
from search_spaces.bundle import load_bundle
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from tests.search_spaces.test_capture_refs import NAME, REF, SOURCE, write_capture

FILE = f"{NAME}-cpu-triton3.0.json"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``tunefleet ARGS`` in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def store(url: str, blocks: dict[int, int]) -> None:
    """Best rows of the captured kernel on class cpu, triton 3.0: problem n -> BLOCK."""
    spec = get_spec(REF)
    database = Database(url)
    database.ensure_schema()
    with database.session() as s:
        cpu = repository.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
        for n, block in blocks.items():
            config = {"BLOCK": block, "num_warps": 2 if block == 64 else 4, "num_stages": 3}
            key = problem_key({"n": n, "dtypes": "float32,float32"})
            repository.upsert_best(
                s, NAME, spec.version_hash(), key, cpu, "3.0", config, 1.0, None, None, None
            )


@pytest.fixture
def captured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The kernel captured in two directories, indexed by `capture --refs`: the lines printed."""
    lines = []
    for directory, key in ((tmp_path / "captures", 100), (tmp_path / "bundles" / "untuned", 300)):
        write_capture(directory, key)
        code, out, err = run(capsys, "capture", "--refs", str(directory))
        assert code == 0, err
        lines.append(out)
    return lines


def test_two_captures_of_one_source_print_one_reference(captured: list[str]) -> None:
    assert captured == [f"{NAME}\t{REF}\n"] * 2


def test_best_and_pull_take_a_captured_reference(
    captured: list[str], capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    store(db_url, {100: 64, 300: 128})
    code, out, err = run(capsys, "best", REF, "--db", db_url, "--json")
    assert code == 0, err
    best = json.loads(out)["best"]
    assert {b["problem"]["n"]: b["config"]["BLOCK"] for b in best} == {100: 64, 300: 128}

    code, out, err = run(capsys, "pull", REF, "--out", str(tmp_path / "b"), "--db", db_url)
    assert code == 0, err
    assert out.split() == [str(tmp_path / "b" / FILE)]


def test_pull_again_merges_with_the_bundle_there(
    captured: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first, second = (f"sqlite:///{tmp_path / name}" for name in ("one.db", "two.db"))
    store(first, {100: 64, 300: 64})
    store(second, {300: 128})  # measured later, elsewhere: only key 300
    out_dir = tmp_path / "bundles"
    for url in (first, second):
        code, _, err = run(capsys, "pull", REF, "--out", str(out_dir), "--db", url)
        assert code == 0, err
    assert err == (
        f"note: merged into {out_dir / FILE}: kept 1 key(s) only it had and 0 newer "
        "measurement(s) of it\n"
    )
    bundle = load_bundle(out_dir / FILE, get_spec(REF))  # the digest checked
    assert {e.problem["n"]: e.config["BLOCK"] for e in bundle.entries} == {100: 64, 300: 128}
    assert sorted(p.name for p in out_dir.iterdir()) == [FILE, "untuned"]


@pytest.mark.parametrize(
    "ref",
    [
        f"captured:../../etc/passwd@{SOURCE}",
        f"captured:/tmp/app.scale@{SOURCE}",
        "captured:app.scale",
        "/etc/passwd",
        "../captures:SPEC",
    ],
)
def test_paths_and_malformed_references_are_refused_in_one_line(
    ref: str, capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    for args in (
        ["best", ref],
        ["pull", ref, "--out", str(tmp_path / "b")],
        ["revalidate", ref, "--device-class", "cpu", "--device", "interpreter"],
    ):
        code, out, err = run(capsys, *args, "--db", db_url)
        assert code == 2, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and out == "", err
    assert not (tmp_path / "b").exists()


def test_a_kernel_captured_elsewhere_names_the_way_to_resolve_it(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    code, _, err = run(capsys, "best", f"captured:app.elsewhere@{SOURCE}", "--db", db_url)
    assert code == 2 and "capture it here" in err and err.count("\n") == 1
