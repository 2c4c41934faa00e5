"""A captured app tuned with and without --widen (CLI, interpreter, short budgets), its bundle
served by the drop-in decorator: known keys launch with no benchmarking, a new key is recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.capture_file import read_capture
from tests.workers.test_capture import APP, ROOT, run_app
from workers.capture_spec import ref_for

CLI = [sys.executable, "-m", "orchestrator"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [*CLI, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
    )


def serve(bundles: Path, *keys: int, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "serve.py", *map(str, keys)],
        cwd=APP,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRITON_INTERPRET": "1",
            "APP_BUNDLE": str(bundles),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The app's capture, read (never written) by every test here."""
    out = tmp_path_factory.mktemp("capture")
    run_app(out)
    return out


def test_capture_tuned_listed_and_widened_then_served(
    capture: Path, tmp_path: Path, db_url: str
) -> None:
    listed = cli("tune", "--from-capture", str(capture), "--device", "interpreter", "--db", db_url)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.count("bundle: tunefleet pull") == 2  # one job per kernel
    wide = cli(
        "tune",
        "--from-capture",
        str(capture),
        "--widen",
        "--trials",
        "3",
        "--device",
        "interpreter",
        "--db",
        db_url,
        "--json",
    )
    assert wide.returncode == 0, wide.stderr
    ref = ref_for(capture, "app_kernels.scaled_add", True)
    pulled = cli("pull", ref, "--out", str(tmp_path / "bundles"), "--db", db_url)
    assert pulled.returncode == 0, pulled.stderr
    (path,) = [Path(p) for p in pulled.stdout.split()]
    bundle = json.loads(path.read_text())
    assert bundle["kernel"] == "app_kernels.scaled_add" and len(bundle["entries"]) == 2
    tuned = {e["problem"]["n"]: e["config"] for e in bundle["entries"]}

    report = serve(tmp_path / "bundles", 100, 300, 500)
    known, unseen = report["keys"][:2], report["keys"][2]
    for key in known:
        assert key["timed"] == 0, key  # served from the bundle: no config benchmarked
        assert key["config"] == tuned[key["n"]]
    assert unseen["timed"] == 2  # not in the bundle: triton.autotune's own sweep of its list
    recorded = read_capture(tmp_path / "bundles" / "untuned")
    assert [launch.problem["n"] for launch in recorded[0].launches] == [500]

    nearest = serve(tmp_path / "bundles", 500, APP_NEAREST="1")
    assert nearest["keys"][0]["timed"] == 0 and nearest["keys"][0]["config"] == tuned[300]


def test_bad_capture_input_exits_2_with_one_line(tmp_path: Path, db_url: str) -> None:
    (tmp_path / "empty").mkdir()
    for args in (
        ["capture", "--", "python3", "app.py"],
        ["capture", "--refs", str(tmp_path / "missing")],
        ["tune", "--from-capture", str(tmp_path / "empty"), "--db", db_url],
        ["tune", "--db", db_url],
    ):
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr


def test_refs_name_each_captured_kernel(capture: Path) -> None:
    done = cli("capture", "--refs", str(capture), "--widen")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split("\t") for line in done.stdout.splitlines())
    assert rows == {
        n: ref_for(capture, n, True) for n in ("app_kernels.row_sum", "app_kernels.scaled_add")
    }


def test_revalidate_takes_the_path_free_reference(capture: Path, tmp_path: Path) -> None:
    """`capture --refs` prints a reference with no path in it; `revalidate` re-times the stored
    bests it names (one trial per key on the interpreter)."""
    from db import Database, repository
    from search_spaces.problem import problem_key
    from search_spaces.registry import get_spec
    from search_spaces.space import Vendor

    done = cli("capture", "--refs", str(capture))
    rows = dict(line.split("\t") for line in done.stdout.splitlines())
    ref = rows["app_kernels.scaled_add"]
    assert ref.startswith("captured:app_kernels.scaled_add@") and "/" not in ref
    spec = get_spec(ref)
    url = f"sqlite:///{tmp_path / 'tunefleet.db'}"
    database = Database(url)
    database.ensure_schema()
    with database.session() as s:
        for problem in spec.problems():
            key = problem_key(problem)
            config = spec.default_config(Vendor.CPU)
            repository.upsert_best(
                s, spec.name, spec.version_hash(), key, "cpu", "3.0", config, 1e6, None, None, None
            )
    done = cli("revalidate", ref, "--device-class", "cpu", "--device", "interpreter", "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("holds") == 2, done.stdout
