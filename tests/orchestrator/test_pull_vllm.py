"""`tunefleet pull fused_moe --format vllm`: one vLLM file per (E, N, dtype) from the database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from db import BestBackend, Database, repository
from orchestrator.bundle_export import BundleFormat, export
from orchestrator.errors import BundleExportError
from search_spaces import get_spec, problem_key

CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}


def seeded(
    tmp_path: Path,
    class_key: str,
    replay: bool = False,
    decide: Callable[[int], repository.BestDecision] | None = None,
) -> Database:
    """fused_moe best rows for M = 1, 64, 1024 on ``class_key``, each decided by ``decide(M)``
    (default: none, a Triton win)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    database = Database(f"sqlite:///{tmp_path / 'best.db'}")
    database.ensure_schema()
    spec = get_spec("fused_moe")
    with database.session() as s:
        repository.ensure_device_class(s, class_key, "nvidia", "NVIDIA H200", "sm_90", replay)
        for m, block_m in ((1, 16), (64, 32), (1024, 64)):
            problem = {"M": m, "E": 8, "topk": 2, "N": 14336, "K": 4096, "dtype": "bfloat16"}
            repository.upsert_best(
                s,
                "fused_moe",
                spec.version_hash(),
                problem_key(problem),
                class_key,
                "3.6",
                {**CONFIG, "BLOCK_SIZE_M": block_m},
                0.5,
                None,
                None,
                None,
                decision=decide(m) if decide else None,
            )
    return database


def test_one_vllm_file_for_many_m(tmp_path: Path) -> None:
    paths = export(
        seeded(tmp_path, "NVIDIA H200"), "fused_moe", tmp_path / "out", fmt=BundleFormat.VLLM
    )
    assert [p.name for p in paths] == ["E=8,N=7168,device_name=NVIDIA_H200.json"]
    content = json.loads(paths[0].read_text())
    assert list(content) == ["1", "64", "1024"]
    assert content["64"] == {**CONFIG, "BLOCK_SIZE_M": 32}


def test_vllm_format_is_refused_for_other_kernels_and_replays(tmp_path: Path) -> None:
    with pytest.raises(BundleExportError, match="use native"):
        export(seeded(tmp_path, "NVIDIA H200"), "matmul", tmp_path / "out", fmt=BundleFormat.VLLM)
    replayed = seeded(tmp_path / "r", "replay:NVIDIA H200", replay=True)
    with pytest.raises(BundleExportError, match="not measurements"):
        export(replayed, "fused_moe", tmp_path / "out2", fmt=BundleFormat.VLLM)
    assert not (tmp_path / "out2").exists()


def test_vendor_won_rows_keep_their_triton_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    def decide(m: int) -> repository.BestDecision:
        won = m == 64
        return repository.BestDecision(
            BestBackend.VENDOR if won else BestBackend.TRITON,
            "torch._grouped_mm",
            0.5,
            0.4 if won else 0.6,
            noise=0.01,
        )

    seeded(tmp_path, "NVIDIA H200", decide=decide)
    with pytest.raises(SystemExit) as done:
        main(
            ["pull", "fused_moe", "--format", "vllm", "--out", str(tmp_path / "out"), "--db",
             f"sqlite:///{tmp_path / 'best.db'}"]
        )  # fmt: skip
    out, err = capsys.readouterr()
    assert done.value.code in (0, None), err
    (path,) = [Path(p) for p in out.split()]
    # read back as vLLM's get_moe_configs does: an object keyed by M strings
    with path.open() as f:
        configs = {int(key): val for key, val in json.load(f).items()}
    assert sorted(configs) == [1, 64, 1024]
    assert configs[64] == {**CONFIG, "BLOCK_SIZE_M": 32}  # the vendor-won M's Triton config
    assert "policy fused_moe NVIDIA H200: 2 triton, 1 vendor" in err
    assert "note: vLLM cannot keep a vendor path: the 1 row(s) where it won hold the fastest" in err
