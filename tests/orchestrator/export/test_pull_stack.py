"""``pull --by-stack``: one folder per Triton minor, and the readers that pick the installed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import Database, repository
from orchestrator.commands.cli import main
from search_spaces import stack
from search_spaces.device_identity import DeviceClass
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.triton_autotune import load_bundles

CFG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "num_warps": 8}
PROBLEM = {"M": 64, "N": 64, "K": 64, "dtype": "float16"}


def _store(database: Database, rows: list[tuple[str, str, str]]) -> None:
    """A best matmul config per (class, triton minor, full triton version of its environment)."""
    spec = get_spec("matmul")
    with database.session() as s:
        for class_key, minor, version in rows:
            class_id = repository.ensure_device_class(s, class_key, "nvidia", class_key, "sm90")
            env = repository.ensure_environment(s, class_id, "560", "cuda 12.8", version, "2.9.0")
            repository.upsert_best(
                s,
                "matmul",
                spec.version_hash(),
                problem_key(PROBLEM),
                class_id,
                minor,
                CFG,
                1.0,
                None,
                None,
                env,
            )


def _pull(out: Path, db_url: str, *args: str) -> int:
    """``pull --by-stack``'s exit code."""
    with pytest.raises(SystemExit) as done:
        main(["pull", "matmul", "--out", str(out), "--db", db_url, "--by-stack", *args])
    return int(done.value.code or 0)


@pytest.fixture
def tree(database: Database, db_url: str, tmp_path: Path) -> Path:
    """A stack tree of two minors: 3.6 (one release: its patch) and 3.9 (two: no patch)."""
    _store(
        database,
        [
            ("NVIDIA H200", "3.6", "3.6.0"),
            ("NVIDIA H200", "3.9", "3.9.1"),
            ("NVIDIA H100", "3.9", "3.9.0"),
        ],
    )
    out = tmp_path / "deploy"
    assert _pull(out, db_url) == 0
    return out


def _installed(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(stack, "installed_triton", lambda: version)


def test_pull_writes_one_folder_per_minor(
    tree: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    assert files == [
        "triton_3_6_0/matmul-NVIDIA_H200-triton3.6.json",
        "triton_3_9/matmul-NVIDIA_H100-triton3.9.json",
        "triton_3_9/matmul-NVIDIA_H200-triton3.9.json",
    ]
    capsys.readouterr()
    assert _pull(tree, db_url) == 0  # again: merged in place, nothing left beside
    assert "note: merged into" in capsys.readouterr().err
    assert len(list(tree.rglob("*"))) == 5
    assert _pull(tree, db_url, "--format", "triton") == 0
    assert (tree / "triton_3_6_0" / "matmul-NVIDIA_H200-triton3.6.py").is_file()


def test_readers_pick_the_installed_minor_or_an_older_one(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.profiling.errors import ProfileError
    from workers.profiling.swap import load_bundles as swap_bundles

    _installed(monkeypatch, "3.9.1")
    assert {b.device_class for b in load_bundles(tree, "matmul")} == {"NVIDIA H200", "NVIDIA H100"}
    assert swap_bundles(tree, "NVIDIA H200")["matmul"].meta["triton_minor"] == "3.9"
    _installed(monkeypatch, "3.6.0")
    (bundle,) = load_bundles(tree, "matmul")
    assert bundle.meta["triton_minor"] == "3.6"
    _installed(monkeypatch, "3.8.0")
    with pytest.warns(RuntimeWarning, match="using the older triton_3_6_0"):
        (bundle,) = load_bundles(tree, "matmul")
    assert bundle.environment["triton"] == "3.6.0"
    _installed(monkeypatch, "3.5.2")
    with pytest.raises(stack.StackError, match="newer Triton only") as refused:
        load_bundles(tree, "matmul")
    assert "\n" not in str(refused.value)
    with pytest.raises(ProfileError, match="newer Triton only"):
        swap_bundles(tree, "NVIDIA H200")


def test_a_hostile_triton_minor_never_reaches_a_path(
    database: Database, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(database, [("NVIDIA H200", "../../../evil", "3.6.0/../../x")])
    out = tmp_path / "deep" / "deploy"
    assert _pull(out, db_url) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "error: cannot lay the bundles out by stack: Triton version '../../../evil' is not a "
        "release number like 3.6.0"
    )
    assert not [p for p in tmp_path.rglob("*") if not p.name.startswith("tunefleet.db")]


def test_the_drop_in_refuses_a_newer_only_tree_in_one_warning(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from search_spaces import triton_autotune
    from search_spaces.bundle_env import VersionPolicy

    _installed(monkeypatch, "3.5.2")
    monkeypatch.setattr(triton_autotune, "_device_class", lambda: DeviceClass.parse("H200"))
    serving = triton_autotune.Serving("matmul", "", tree, VersionPolicy.USE, False, None)
    with pytest.warns(RuntimeWarning) as warned:
        assert serving.bundle() is None
    (warning,) = [str(w.message) for w in warned]
    assert "newer Triton only" in warning and warning.endswith("tuning as triton.autotune does")


def test_vllm_files_by_stack_match_the_flat_ones(tmp_path: Path) -> None:
    from tests.orchestrator.export.test_pull_vllm import seeded

    seeded(tmp_path, "NVIDIA H200")
    db_url = f"sqlite:///{tmp_path / 'best.db'}"
    for folder, by_stack in (("flat", []), ("stack", ["--by-stack"])):
        with pytest.raises(SystemExit) as done:
            main(["pull", "fused_moe", "--format", "vllm", "--out", str(tmp_path / folder),
                  "--db", db_url, *by_stack])  # fmt: skip
        assert not done.value.code
    (flat,) = (tmp_path / "flat").iterdir()
    # no environment stored: the patch is unknown
    assert (tmp_path / "stack" / "triton_3_6" / flat.name).read_text() == flat.read_text()
