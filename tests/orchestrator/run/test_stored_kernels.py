"""A job row names its kernel; `job ID` shows the job from its rows alone, and `resume ID` never
imports a ``module:attribute`` from it unless the kernel is registered or the user names it again
with ``--kernel-module``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from db import Database, repository
from search_spaces import RegistryError
from search_spaces.registry import spec_from_storage
from tests.orchestrator.commands.test_cli_core import run

PLANTED = "tf_planted_kernel_mod"


def _plant(tmp_path: Path) -> tuple[str, int]:
    """A module in the viewer's folder that leaves a marker when imported, and a job row that
    names it; the database URL and the job id."""
    (tmp_path / f"{PLANTED}.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('IMPORTED').write_text('ran')\nSPEC = None\n"
    )
    url = f"sqlite:///{tmp_path / 't.db'}"
    database = Database(url)
    database.upgrade()
    with database.session() as s:
        kernel = repository.ensure_kernel(s, "planted", "v1", "s1")
        spec = {"kernel": f"{PLANTED}:SPEC", "problems": [{"N": 8}]}
        job = repository.create_job(s, kernel, spec, None)
    database.close()
    return url, job


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    monkeypatch.chdir(tmp_path)  # the registry would look for the module here
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, PLANTED, raising=False)
    return _plant(tmp_path)


def test_a_planted_job_row_imports_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, planted: tuple[str, int]
) -> None:
    url, job = planted
    code, out, err = run(capsys, "job", str(job), "--db", url)  # a view needs no kernel spec
    assert code == 0, err
    assert f"job {job} · planted · queued" in out
    code, _, err = run(capsys, "resume", str(job), "--db", url)
    assert code == 2, err
    assert err.count("\n") == 1
    assert f"kernel '{PLANTED}:SPEC' is not registered" in err and "--kernel-module" in err
    assert not (tmp_path / "IMPORTED").exists()
    assert PLANTED not in sys.modules


def test_a_kernel_module_named_again_is_imported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, planted: tuple[str, int]
) -> None:
    url, job = planted
    code, _, err = run(
        capsys, "resume", str(job), "--db", url, "--kernel-module", f"{PLANTED}:SPEC"
    )
    assert (tmp_path / "IMPORTED").exists()  # the user asked for it
    assert code == 2 and "not a tunefleet KernelSpec" in err  # and it is no spec


def test_spec_from_storage_loads_registered_names_and_allowed_modules() -> None:
    assert spec_from_storage("matmul").name == "matmul"
    ref = "tests.workers.fake_specs:DoubleSpec"
    with pytest.raises(RegistryError, match="is not registered"):
        spec_from_storage(ref)
    assert spec_from_storage(ref, [ref]).name == "double"
    assert spec_from_storage(ref, ["tests.workers.fake_specs"]).name == "double"
    with pytest.raises(RegistryError, match="is not registered"):
        spec_from_storage(ref, ["tests.workers"])  # a parent package allows nothing below it
