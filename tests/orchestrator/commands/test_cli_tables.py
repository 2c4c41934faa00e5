"""Tables at 80 columns: no line wider than the terminal, no header cut or split, no cell cut
short (…), a legend for short headers; --wide shows every column's full header; a best config
from a cancelled job is marked in `best` (and --json) and `pull` says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from db import Database
from orchestrator.app.jobs import cancel_job, submit_job
from orchestrator.commands.cli import main
from orchestrator.run.jobs import JobSpec
from tests.orchestrator.rows import add_study

SMALL = {"M": 16, "N": 16, "K": 16, "dtype": "float16"}


def run(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(args)
    out, err = capsys.readouterr()
    assert done.value.code in (0, None), err
    return out


def headers(out: str) -> list[str]:
    """The header cells of the first table in ``out``, each joined over its lines."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    rows = [[c.strip() for c in line.strip("┃").split("┃")] for line in lines[top + 1 : bottom]]
    return [" ".join(filter(None, column)) for column in zip(*rows, strict=True)]


def assert_fits(out: str, width: int = 80) -> None:
    assert out.strip(), "nothing printed"
    assert max(len(line) for line in out.splitlines()) <= width, out
    assert "…" not in out, out


@pytest.mark.parametrize(
    ("args", "expected", "legend"),
    [
        (["kernels"], ["kernel", "description", "example"], None),
        (
            ["devices", "--known"],
            ["name", "arch", "SMs/CUs", "GB/s", "TFLOP/s", "FP8 TF/s"],
            "TFLOP/s = bf16 dense TFLOP/s; FP8 TF/s = fp8 dense TFLOP/s",
        ),
        (
            ["devices"],
            ["#", "class", "arch", "backend", "GiB", "SMs/CUs", "triton", "torch"],
            "GiB = memory GiB",
        ),
    ],
)
def test_tables_fit_80_columns_with_whole_headers(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    expected: list[str],
    legend: str | None,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = run(capsys, args)
    assert_fits(out)
    assert headers(out) == expected, out
    if legend is not None:
        assert legend in " ".join(out.split()), out


def test_kernels_show_whole_attention_examples(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from search_spaces import get_spec

    monkeypatch.setenv("COLUMNS", "80")
    out = " ".join(run(capsys, ["kernels"]).replace("│", " ").split())
    for name in ("flash_attention", "paged_attention"):
        for key, value in get_spec(name).example.items():
            assert f"{key}={value}" in out, (name, key, out)


def test_wide_shows_every_column_at_full_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.device_table import KNOWN_CLASSES

    monkeypatch.setenv("COLUMNS", "80")
    out = run(capsys, ["devices", "--known", "--wide"])
    found = headers(out)
    assert len(found) == len(KNOWN_CLASSES[0].to_dict()), found
    assert "memory bandwidth GB/s" in found and "shared mem per block" in found
    assert "…" not in out and "more column(s)" not in out
    assert KNOWN_CLASSES[0].source in out  # the longest cell, on one line


def test_best_and_pull_mark_a_config_from_a_cancelled_job(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("TUNEFLEET_SERVER", raising=False)
    url = f"sqlite:///{tmp_path}/cancelled.db"
    database = Database(url)
    database.ensure_schema()
    job = submit_job(database, JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL]}))
    add_study(database, job, SMALL, [("ok", 2.0), ("ok", 0.7)])
    cancel_job(database, job)
    out = run(capsys, ["best", "matmul", "--db", url])
    assert_fits(out)
    (row,) = [line for line in out.splitlines() if "M=16" in line]
    assert f"{job}*" in row
    note = " ".join(out.split("more column(s)")[-1].split())
    assert f"* from cancelled job {job}: its fastest trial so far, not re-timed" in note
    assert f"`tunefleet resume {job}` finishes it" in note
    (best,) = json.loads(run(capsys, ["best", "matmul", "--db", url, "--json"]))["best"]
    assert best["cancelled_job"] is True and best["job"] == job
    with pytest.raises(SystemExit) as done:
        main(["pull", "matmul", "--out", str(tmp_path / "bundle"), "--db", url])
    out, err = capsys.readouterr()
    assert done.value.code in (0, None) and out.strip().endswith(".json"), err
    assert err.startswith(f"note: * from cancelled job {job}") and err.count("\n") == 1
