"""Output errors: a bad ``--out`` is refused in one line (exit 2) before any work, files are
written whole or not at all, and timed results are never lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from db import Database, repository
from orchestrator.output import OutputError, write_atomically
from orchestrator.run.record import save_landscape
from workers.landscape import Landscape, LandscapeResult, read_landscape
from workers.measurement import Outcome

from .test_cli_core import TINY, run


def _unwritable_folder(tmp_path: Path) -> Path:
    """An existing folder no file can be created in (root ignores permissions: /proc then)."""
    if os.geteuid() == 0:
        return Path("/proc")
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def _landscape() -> Landscape:
    landscape = Landscape(
        kernel="matmul", kernel_version="v", problem={"M": 32}, device={"name": "NVIDIA H200"}
    )
    landscape.results.append(LandscapeResult({"BLOCK_M": 16}, Outcome.OK, 0.5))
    return landscape


def test_record_to_an_unwritable_path_is_refused_before_timing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    folder = tmp_path / "dir.json"
    folder.mkdir()
    for out in (blocker / "land.json", _unwritable_folder(tmp_path) / "land.json", folder):
        code, stdout, err = run(
            capsys, "record", "matmul", "-p", TINY, "--limit", "1", "--out", str(out)
        )
        assert code == 2, err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert "--out" in err
        assert "configs" not in stdout  # nothing was timed
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["a-file"]


def test_landscape_that_cannot_be_written_is_kept_elsewhere(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OutputError, match=r"the results were saved to (\S+) instead") as info:
        save_landscape(blocker / "land.json.gz", _landscape())
    assert "\n" not in str(info.value)
    kept = Path(str(info.value).rsplit("saved to ", 1)[1].split(" instead")[0])
    assert read_landscape(kept).results == _landscape().results
    good = save_landscape(tmp_path / "land.json.gz", _landscape())
    assert read_landscape(good).results == _landscape().results
    assert [p.name for p in tmp_path.iterdir()] == sorted(["a-file", "land.json.gz"])


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    target.write_text("old")

    def half(temp: Path) -> None:
        temp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match="No space left on device"):
        write_atomically(target, half)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_plot_to_an_unwritable_folder_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    database = Database(url)
    database.upgrade()
    with database.session() as s:
        dc = repository.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
        kernel = repository.ensure_kernel(s, "matmul", "v1", "s1")
        job = repository.create_job(s, kernel, {}, None)
        repository.ensure_study(s, job, kernel, "{}", {"M": 32}, dc, "tpe", "job-study")
    database.close()
    code, _, err = run(
        capsys, "plot", str(job), "--out", str(_unwritable_folder(tmp_path)), "--db", url
    )
    assert code == 2, err
    assert err.startswith("error: cannot write into") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://team:secret@db:abc/tune",
        "postgresql+psycopg://team@db:99999/tune",
        "sqlite+pysqlite://[::1/x",
    ],
)
def test_database_url_with_a_bad_port_is_one_line(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    for command in (("db", "upgrade"), ("jobs",)):
        code, _, err = run(capsys, *command, "--db", url)
        assert code == 2, err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert "secret" not in err
