"""A SQLite file made read-only (file, its WAL and shared-memory files, and its folder:
``chmod a-w``) under a running ``tunefleet tune``, as a user whom file permissions bind: the
driver ends with one ``error:`` line and exit code 2, never a signal (issue 45 saw SIGBUS, exit
-7, after the line). Root ignores permissions, so as root the tune runs with the capabilities that
bypass them dropped (``setpriv``): the same checks an unprivileged user meets, in CI too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.workers.fake_specs import CRASHED_ENV, RELEASE_ENV, ref

ROOT = Path(__file__).resolve().parents[2]
#: Capabilities by which root reads and writes whatever the permissions say.
BYPASS = "dac_override,dac_read_search,fowner"
WAIT_S = 180


def _unprivileged() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot bind")
    drop = ",".join(f"-{c}" for c in BYPASS.split(","))
    return ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]


def test_a_sqlite_file_and_folder_made_read_only_mid_job_end_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    url = f"sqlite:///{folder / 'tf.db'}"
    crashed, release = tmp_path / "crashed", tmp_path / "release"
    env = {**os.environ, CRASHED_ENV: str(crashed), RELEASE_ENV: str(release)}
    cli = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]
    tune = ["tune", ref("CrashOnceThenWaitSpec"), "-p", "N=40", "--device", "interpreter"]
    proc = subprocess.Popen(
        [*_unprivileged(), *cli, *tune, "--trials", "3", "--db", url],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not crashed.exists():  # the first trial crashed: its re-measurement waits
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.0)
        files = sorted(folder.iterdir())
        assert {f.name for f in files} >= {"tf.db", "tf.db-wal", "tf.db-shm"}
        for path in [*files, folder]:
            path.chmod(path.stat().st_mode & ~0o222)
        release.touch()
        _out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for path in [folder, *folder.iterdir()]:
            path.chmod(path.stat().st_mode | 0o200)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2, err[-2000:]
    assert len(errors) == 1 and "read-only" in errors[0], err[-2000:]
    assert "Traceback" not in err
