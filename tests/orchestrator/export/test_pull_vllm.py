"""`tunefleet pull fused_moe --format vllm`: one vLLM file per (E, N, dtype) from the database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from db import BestBackend, Database, repository
from orchestrator.errors import BundleExportError
from orchestrator.export.bundle import BundleFormat, export
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
        class_id = repository.ensure_device_class(
            s, class_key, "nvidia", "NVIDIA H200", "sm_90", replay
        )
        for m, block_m in ((1, 16), (64, 32), (1024, 64)):
            problem = {"M": m, "E": 8, "topk": 2, "N": 14336, "K": 4096, "dtype": "bfloat16"}
            repository.upsert_best(
                s,
                "fused_moe",
                spec.version_hash(),
                problem_key(problem),
                class_id,
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
    from orchestrator.commands.cli import main

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


FP8 = {**CONFIG, "GROUP_SIZE_M": 16, "SPLIT_K": 1, "TMA": False}
#: (N, K, M) -> (config overrides, vendor won): DeepSeek-V3's q_b and o projections at TP 8.
FP8_ROWS: dict[tuple[int, int, int], tuple[dict[str, object], bool]] = {
    (7168, 2048, 1): ({"SPLIT_K": 4}, False),
    (7168, 2048, 16): ({}, True),
    (7168, 2048, 64): ({"BLOCK_SIZE_M": 32, "TMA": True}, True),
    (7168, 2048, 1024): ({"BLOCK_SIZE_M": 128, "num_warps": 8}, False),
    (3072, 1536, 1): ({"BLOCK_SIZE_N": 32}, False),
    (3072, 1536, 4096): ({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "num_stages": 4}, False),
}


def seeded_fp8(
    tmp_path: Path,
    name: str = "NVIDIA H100 80GB HBM3",
    vendor: str = "nvidia",
    rows: dict[tuple[int, int, int], tuple[dict[str, object], bool]] = FP8_ROWS,
    replay: bool = False,
) -> str:
    """fp8_matmul best rows ``rows`` on a class named ``name``; the database URL."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{tmp_path / 'fp8.db'}"
    database = Database(url)
    database.ensure_schema()
    spec = get_spec("fp8_matmul")
    with database.session() as s:
        class_id = repository.ensure_device_class(s, name, vendor, name, "sm_90", replay)
        for (n, k, m), (changes, vendor_won) in rows.items():
            repository.upsert_best(
                s, "fp8_matmul", spec.version_hash(), problem_key({"M": m, "N": n, "K": k}),
                class_id, "3.6", {**FP8, **changes}, 0.5, None, None, None,
                decision=repository.BestDecision(
                    BestBackend.VENDOR if vendor_won else BestBackend.TRITON,
                    "torch._scaled_mm", 0.5, 0.4 if vendor_won else 0.6, noise=0.01,
                ),
            )  # fmt: skip
    return url


def pull(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from orchestrator.commands.cli import main

    with pytest.raises(SystemExit) as done:
        main(["pull", "fp8_matmul", "--format", "vllm", *args])
    out, err = capsys.readouterr()
    return int(done.value.code or 0), out, err


def load_as_vllm(path: Path) -> dict[int, dict[str, object]]:
    """What vLLM's ``get_w8a8_block_fp8_configs`` returns for the file: M (int) -> config."""
    with path.open() as f:
        return {int(key): val for key, val in json.load(f).items()}


def test_fp8_matmul_gets_one_block_fp8_file_per_n_and_k(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = seeded_fp8(tmp_path)
    code, out, err = pull(capsys, "--out", str(tmp_path / "out"), "--db", url, "--json")
    assert code == 0, err
    result = json.loads(out)
    device = "device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert [Path(p).name for p in result["files"]] == [
        f"N=3072,K=1536,{device}",
        f"N=7168,K=2048,{device}",
    ]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        Path(p).name for p in result["files"]
    )
    written: dict[tuple[int, int, int], dict[str, object]] = {}
    for path in map(Path, result["files"]):
        configs = load_as_vllm(path)
        n, k = (int(part.split("=")[1]) for part in path.name.split(",")[:2])
        for m, config in configs.items():
            # vLLM passes every key to its kernel: exactly its six, all integers
            assert list(config) == [
                "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
                "num_stages",
            ]  # fmt: skip
            assert all(type(v) is int for v in config.values())
            written[(n, k, m)] = config
    # the round trip: every expressible row as measured, no SPLIT_K > 1 or TMA row at all
    expressible = {
        key: {k: v for k, v in {**FP8, **changes}.items() if k not in ("SPLIT_K", "TMA")}
        for key, (changes, _) in FP8_ROWS.items()
        if "SPLIT_K" not in changes and "TMA" not in changes
    }
    assert written == expressible
    assert written[(7168, 2048, 16)] == {
        k: v for k, v in FP8.items() if k not in ("SPLIT_K", "TMA")
    }
    # vLLM's choice for a batch of 20 tokens: the nearest M written (16, not the skipped 1 or 64)
    configs = load_as_vllm(Path(result["files"][1]))
    assert min(configs, key=lambda x: abs(x - 20)) == 16
    assert configs[min(configs, key=lambda x: abs(x - 700))]["BLOCK_SIZE_M"] == 128
    assert result["skipped"] == [
        {"device_class": "NVIDIA H100 80GB HBM3", "problem": {"M": 1, "N": 7168, "K": 2048},
         "reason": "SPLIT_K=4"},
        {"device_class": "NVIDIA H100 80GB HBM3", "problem": {"M": 64, "N": 7168, "K": 2048},
         "reason": "TMA=True"},
    ]  # fmt: skip
    assert (
        "note: N=7168,K=2048 on NVIDIA H100 80GB HBM3: left out M=1 (SPLIT_K=4), M=64 (TMA=True): "
        "vLLM's kernel lacks these parameters" in err
    )
    # the vendor won M=16 (written with its Triton config) and M=64 (left out): one row counts
    assert "note: vLLM cannot keep a vendor path: the 1 row(s) where it won" in err


def test_fp8_device_names_stay_whole_and_inside_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = seeded_fp8(tmp_path, name="NVIDIA H200 NVL")
    code, out, err = pull(capsys, "--out", str(tmp_path / "out"), "--db", url)
    assert code == 0, err
    # vLLM folds the H200 family only for fused-MoE files
    assert Path(out.split()[0]).name.startswith("N=3072,K=1536,device_name=NVIDIA_H200_NVL,")
    for name in ("../../escape", "NVIDIA/H200"):
        url = seeded_fp8(tmp_path / name.replace("/", "_"), name=name)
        code, out, err = pull(capsys, "--out", str(tmp_path / "bad"), "--db", url)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert "cannot be part of a vLLM file name" in err
    assert not (tmp_path / "bad").exists()
    assert not list(tmp_path.parent.glob("escape*"))


def test_pull_vllm_of_a_kernel_without_vllm_files_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.commands.cli import main

    url = seeded_fp8(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["pull", "matmul", "--format", "vllm", "--out", str(tmp_path / "out"), "--db", url])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and out == "" and err.count("\n") == 1, err
    assert "matmul has none: use native" in err
    assert not (tmp_path / "out").exists()


def test_fp8_refusals_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    interpreter = seeded_fp8(tmp_path / "cpu", name="cpu", vendor="cpu")
    replayed = seeded_fp8(tmp_path / "replay", name="replay:NVIDIA H200", replay=True)
    split_only = seeded_fp8(tmp_path / "split", rows={(7168, 2048, 1): ({"SPLIT_K": 2}, False)})
    for url, words in (
        (interpreter, "Triton interpreter timings, not GPU measurements"),
        (replayed, "replayed results, not measurements"),
        (split_only, "none of the 1 fp8_matmul result(s) can run in vLLM's kernel"),
    ):
        code, out, err = pull(capsys, "--out", str(tmp_path / "out"), "--db", url)
        assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "out").exists()


def test_fp8_rows_vllm_cannot_run_take_the_fastest_trial_it_can(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """M=1's best is split-K and M=64's uses TMA; their trials hold configs vLLM's kernel runs.
    The file gets each key's fastest such trial (not a faster TMA one, not a faster trial of a
    failed verdict or of another class), the native bundle carries it as ``vllm``, and the note
    names both times; a key with no such trial stays left out."""
    from search_spaces.space import config_key

    url = seeded_fp8(tmp_path)
    spec = get_spec("fp8_matmul")
    database = Database(url)
    plain = {k: v for k, v in FP8.items() if k not in ("SPLIT_K", "TMA")}
    with database.session() as s:
        kernel = repository.ensure_kernel(s, "fp8_matmul", spec.version_hash(), spec.space.hash())
        h100 = repository.device_class_by_key(s, "NVIDIA H100 80GB HBM3")
        other = repository.ensure_device_class(s, "NVIDIA H200", "nvidia", "NVIDIA H200", "sm_90")
        assert h100 is not None
        for m, changes, ms, outcome, class_id in (
            (1, {"BLOCK_SIZE_M": 16, "num_stages": 4}, 0.71, "ok", h100.id),
            (1, {"BLOCK_SIZE_M": 32}, 0.83, "ok", h100.id),
            (1, {"TMA": True}, 0.52, "ok", h100.id),  # faster, but vLLM has no TMA
            (1, {"BLOCK_SIZE_M": 64}, 0.40, "wrong", h100.id),
            (1, {"BLOCK_SIZE_M": 128}, 0.30, "ok", other),
            (64, {"BLOCK_SIZE_M": 64, "num_warps": 8}, 0.66, "ok", h100.id),
        ):
            config = {**FP8, **changes}
            repository.record_trial(
                s, kernel_id=kernel, problem_key=problem_key({"M": m, "N": 7168, "K": 2048}),
                device_class_id=class_id, config=config, config_key=config_key(config),
                outcome=outcome, median_ms=ms,
            )  # fmt: skip
    database.close()
    reads = []
    fastest = repository.fastest_ok_configs
    monkeypatch.setattr(repository, "fastest_ok_configs", lambda *a: reads.append(a) or fastest(*a))
    code, out, err = pull(capsys, "--out", str(tmp_path / "out"), "--db", url, "--json")
    assert code == 0, err
    # one read of each key's fallback trials, for the files and the report
    assert sorted(json.loads(a[4])["M"] for a in reads) == [1, 64]
    result = json.loads(out)
    files = {Path(p).name.split(",")[0]: load_as_vllm(Path(p)) for p in result["files"]}
    assert files["N=7168"][1] == {**plain, "BLOCK_SIZE_M": 16, "num_stages": 4}
    assert files["N=7168"][64] == {**plain, "BLOCK_SIZE_M": 64, "num_warps": 8}
    assert result["skipped"] == []
    assert (
        "note: N=7168,K=2048 on NVIDIA H100 80GB HBM3: M=1 0.71 ms vs 0.5, M=64 0.66 ms vs 0.5: "
        "the best config needs a parameter vLLM's kernel lacks" in err
    )
    code, out, err = pull(capsys, "--out", str(tmp_path / "native"), "--db", url, "--format",
                          "native", "--json")  # fmt: skip
    assert code == 0, err
    (native,) = json.loads(out)["files"]
    by_m = {
        e["problem"]["M"]: e for e in json.loads(Path(native).read_text())["entries"]
        if e["problem"]["N"] == 7168
    }  # fmt: skip
    assert by_m[1]["vllm"] == {"config": {**FP8, "BLOCK_SIZE_M": 16, "num_stages": 4},
                               "time_ms": 0.71}  # fmt: skip
    assert "vllm" not in by_m[16] and by_m[1]["config"]["SPLIT_K"] == 4
