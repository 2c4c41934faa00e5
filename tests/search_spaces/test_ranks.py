"""Ranks prove they serve the same bundles: two real processes on the CPU joined by gloo over
loopback; the rank a process records its misses under."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.bundle import Bundle, BundleError, bundle_digest, load_bundle
from search_spaces.ranks import check_same_bundles, current_rank
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def write_bundle(path: Path, block: int, kernel: str = "matmul") -> Path:
    doc = {
        "format": "tunefleet-bundle/1",
        "kernel": kernel,
        "device_class": "cpu",
        "default": {"BLOCK": 64},
        "entries": [{"problem": {"n": 100}, "config": {"BLOCK": block}}],
    }
    path.write_text(json.dumps({**doc, "digest": bundle_digest(doc)}))
    return path


def two_ranks(*per_rank: list[Path]) -> list[dict]:
    """Start one rank_app.py per list of bundle files; their reports by rank."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(len(per_rank)),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.search_spaces.rank_app", *map(str, files)],
            cwd=ROOT,
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, files in enumerate(per_rank)
    ]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            reports.append(json.loads(out.splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return sorted(reports, key=lambda r: r["rank"])


def test_two_ranks_with_one_bundle_pass_with_one_collective_and_differ_with_one_line(
    tmp_path: Path,
) -> None:
    a, b = write_bundle(tmp_path / "a.json", 128), write_bundle(tmp_path / "b.json", 256)
    same = two_ranks([a], [a])
    assert [r["error"] for r in same] == [None, None]
    assert [r["collectives"] for r in same] == [["c10d::allgather_"]] * 2

    differ = two_ranks([a], [b])
    digest_a, digest_b = load_bundle(a).digest, load_bundle(b).digest
    for report in differ:
        error = report["error"]
        assert error is not None and "\n" not in error
        assert f"rank 0 holds {digest_a[:16]}... (matmul on cpu)" in error
        assert f"rank 1 holds {digest_b[:16]}... (matmul on cpu)" in error
    assert differ[0]["error"] == differ[1]["error"]  # every rank raises the same line


def test_order_does_not_matter_and_a_missing_bundle_is_named(tmp_path: Path) -> None:
    a = write_bundle(tmp_path / "a.json", 128)
    b = write_bundle(tmp_path / "b.json", 128, kernel="rmsnorm")
    assert [r["error"] for r in two_ranks([a, b], [b, a])] == [None, None]
    (report, _) = two_ranks([a, b], [a])
    assert f"rank 0 holds {load_bundle(b).digest[:16]}... (rmsnorm on cpu)" in report["error"]
    assert "rank 1 holds no other bundle" in report["error"]
    assert "2 vs 1 bundles" in report["error"]


def test_without_torch_distributed_it_checks_its_input_and_returns(tmp_path: Path) -> None:
    bundle = load_bundle(write_bundle(tmp_path / "a.json", 128))
    check_same_bundles([bundle, bundle.digest])
    with pytest.raises(BundleError, match="no digest"):
        check_same_bundles([Bundle("matmul", "", "cpu", {"BLOCK": 64}, [])])
    with pytest.raises(BundleError, match="item 0 is 'abc'"):
        check_same_bundles(["abc"])


@pytest.mark.parametrize(
    "env,rank", [({}, 0), ({"RANK": "3"}, 3), ({"LOCAL_RANK": "2"}, 2), ({"RANK": "x/../1"}, 0)]
)
def test_rank_from_the_environment(monkeypatch: pytest.MonkeyPatch, env: dict, rank: int) -> None:
    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert current_rank() == rank


def test_importing_loads_no_gpu_library() -> None:
    from tests.test_imports import GPU_LIBS, _loaded_after

    assert _loaded_after("import search_spaces.ranks", GPU_LIBS) == []
