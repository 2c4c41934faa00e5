"""vLLM's per-device fused-MoE config files: names as vLLM looks them up, content, grouping."""

import json
from pathlib import Path

import pytest

from orchestrator.errors import BundleExportError
from orchestrator.export.vllm import (
    inexpressible,
    vllm_config,
    vllm_file_name,
    vllm_files,
    vllm_fp8_file_name,
    vllm_fp8_files,
    vllm_skipped,
    write_vllm_files,
)


def _config(bm: int, **extra: int) -> dict[str, int]:
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": 128,
        "BLOCK_SIZE_K": 64,
        "GROUP_SIZE_M": 16,
        "num_warps": 4,
        "num_stages": 3,
        **extra,
    }


def _problem(m: int, n: int = 28672, k: int = 4096, dtype: str = "bfloat16") -> dict[str, object]:
    return {"M": m, "E": 8, "topk": 2, "N": n, "K": k, "dtype": dtype}


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((8, 14336, "NVIDIA H200", None), "E=8,N=14336,device_name=NVIDIA_H200.json"),
        ((8, 14336, "NVIDIA H200 NVL", None), "E=8,N=14336,device_name=NVIDIA_H200.json"),
        (
            (8, 7168, "NVIDIA H100 80GB HBM3", "fp8_w8a8"),
            "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
        ),
        (
            (8, 14336, "AMD Instinct MI300X", None),
            "E=8,N=14336,device_name=AMD_Instinct_MI300X.json",
        ),
    ],
)
def test_file_name_follows_vllm(args: tuple[int, int, str, str | None], name: str) -> None:
    assert vllm_file_name(*args) == name


def test_content_maps_batch_size_to_config_in_numeric_order() -> None:
    entries = [(_problem(m), _config(bm)) for m, bm in [(1024, 128), (1, 16), (64, 64), (256, 64)]]
    content = vllm_config(entries)
    assert list(content) == ["1", "64", "256", "1024"]
    assert content["1"] == {
        "BLOCK_SIZE_M": 16,
        "BLOCK_SIZE_N": 128,
        "BLOCK_SIZE_K": 64,
        "GROUP_SIZE_M": 16,
        "num_warps": 4,
        "num_stages": 3,
    }
    assert list(content["1"]) == [
        "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages",
    ]  # fmt: skip


def test_amd_options_are_kept_like_vllms_rocm_files() -> None:
    amd = _config(32, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2)
    content = vllm_config([(_problem(16), amd)])
    assert content["16"]["waves_per_eu"] == 2
    assert content["16"]["matrix_instr_nonkdim"] == 16 and content["16"]["kpack"] == 2


@pytest.mark.parametrize(
    ("other", "words"),
    [
        (_problem(16, k=5120), "only M may differ"),
        (_problem(16, dtype="float16"), "only M may differ"),
        (_problem(1), "two results for M=1"),
    ],
)
def test_mismatched_entries_are_refused(other: dict[str, object], words: str) -> None:
    with pytest.raises(BundleExportError, match=words) as info:
        vllm_config([(_problem(1), _config(16)), (other, _config(16))])
    assert "\n" not in str(info.value)


def test_config_without_vllm_keys_is_refused() -> None:
    with pytest.raises(BundleExportError, match=r"lacks BLOCK_SIZE_N, .*num_stages"):
        vllm_config([(_problem(1), {"BLOCK_SIZE_M": 16, "num_warps": 4})])


def test_one_file_per_shape_named_by_vllms_n(tmp_path: Path) -> None:
    # Mixtral-8x7B on one GPU: w1 is [8, 2*14336, 4096], vLLM's file says N=14336. At TP=2 the
    # first GEMM has N=14336 and the file says N=7168.
    mixtral = [(_problem(m), _config(bm)) for m, bm in [(16, 16), (1, 16), (4096, 128)]]
    tp2 = [(_problem(m, n=14336), _config(64)) for m in (1, 64)]
    paths = write_vllm_files(mixtral + tp2, "NVIDIA H200", tmp_path / "configs")

    assert [p.name for p in paths] == [
        "E=8,N=7168,device_name=NVIDIA_H200.json",
        "E=8,N=14336,device_name=NVIDIA_H200.json",
    ]
    loaded = json.loads(paths[1].read_text())
    assert loaded == vllm_config(mixtral)
    # vLLM's loader: int keys, then the entry nearest to the running batch size.
    configs = {int(key): value for key, value in loaded.items()}
    assert configs[min(configs, key=lambda m: abs(m - 3000))]["BLOCK_SIZE_M"] == 128
    assert list(json.loads(paths[0].read_text())) == ["1", "64"]


def test_float16_and_bfloat16_share_vllms_file_so_they_cannot_mix(tmp_path: Path) -> None:
    entries = [(_problem(1), _config(16)), (_problem(2, dtype="float16"), _config(16))]
    with pytest.raises(BundleExportError, match="only M may differ"):
        write_vllm_files(entries, "NVIDIA H200", tmp_path)


def test_odd_n_and_unwritable_folder_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleExportError, match="N=14335 is odd"):
        write_vllm_files([(_problem(1, n=14335), _config(16))], "NVIDIA H200", tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BundleExportError, match="cannot write"):
        write_vllm_files([(_problem(1), _config(16))], "NVIDIA H200", blocker)
    with pytest.raises(BundleExportError, match="no fused_moe results"):
        write_vllm_files([], "NVIDIA H200", tmp_path)


def test_down_projection_gets_the_down_twin_of_the_layers_file(tmp_path: Path) -> None:
    # Mixtral-8x7B: the up GEMM's w1 is [8, 2*14336, 4096], the down GEMM's w2 [8, 4096, 14336];
    # both files are named by the intermediate size 14336, the down one with SGLang's "_down".
    up = [(_problem(m), _config(64)) for m in (1, 64)]
    down = [({**_problem(m, n=4096, k=14336), "gemm": "down"}, _config(bm)) for m, bm in
            [(64, 32), (1, 16)]]  # fmt: skip
    paths = write_vllm_files(up + down, "NVIDIA H200", tmp_path)
    assert [p.name for p in paths] == [
        "E=8,N=14336,device_name=NVIDIA_H200.json",
        "E=8,N=14336,device_name=NVIDIA_H200_down.json",
    ]
    assert json.loads(paths[1].read_text()) == vllm_config(down)
    assert json.loads(paths[1].read_text())["1"]["BLOCK_SIZE_M"] == 16
    assert vllm_file_name(8, 14336, "NVIDIA H200", "fp8_w8a8", down=True) == (
        "E=8,N=14336,device_name=NVIDIA_H200,dtype=fp8_w8a8_down.json"
    )


def test_a_problem_without_gemm_is_the_up_projection_and_others_are_refused() -> None:
    old = {k: v for k, v in _problem(1).items() if k != "gemm"}
    assert vllm_config([(old, _config(16)), ({**_problem(2), "gemm": "up"}, _config(16))])
    with pytest.raises(BundleExportError, match="only M may differ"):
        vllm_config([(_problem(1), _config(16)), ({**_problem(2), "gemm": "down"}, _config(16))])
    with pytest.raises(BundleExportError, match="gemm='gate'"):
        vllm_config([({**_problem(1), "gemm": "gate"}, _config(16))])


@pytest.mark.parametrize("name", ["../../etc/x", "a/b", "..", "NVIDIA H200\\x", ""])
def test_a_device_name_that_could_leave_the_folder_is_refused(name: str) -> None:
    with pytest.raises(BundleExportError, match="cannot be part of a vLLM file name"):
        vllm_file_name(8, 14336, name, None)


def test_fp8_file_name_follows_vllms_block_fp8_loader() -> None:
    # get_w8a8_block_fp8_configs: the GPU name with spaces as "_", no H200 family folding
    assert vllm_fp8_file_name(7168, 2048, "NVIDIA H200 NVL") == (
        "N=7168,K=2048,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    with pytest.raises(BundleExportError, match="cannot be part of a vLLM file name"):
        vllm_fp8_file_name(7168, 2048, "../NVIDIA H200")


def test_fp8_configs_vllms_kernel_cannot_run_are_left_out() -> None:
    vllm_like = {**_config(16), "SPLIT_K": 1, "TMA": False}
    fp8 = {"M": 1, "N": 256, "K": 256}
    assert inexpressible("fp8_matmul", fp8, vllm_like) is None
    assert inexpressible("fp8_matmul", fp8, _config(16, waves_per_eu=2)) is None  # AMD: no TMA
    assert inexpressible("fp8_matmul", fp8, {**vllm_like, "SPLIT_K": 8, "TMA": True}) == (
        "SPLIT_K=8, TMA=True"
    )
    entries = [
        ({"M": 1, "N": 256, "K": 256}, {**vllm_like, "SPLIT_K": 2}),
        ({"M": 8, "N": 256, "K": 256}, vllm_like),
        ({"M": 1, "N": 512, "K": 256}, {**vllm_like, "TMA": True}),
    ]
    ((name, text),) = vllm_fp8_files(entries, "NVIDIA H100")
    assert name.startswith("N=256,K=256,device_name=NVIDIA_H100,")
    assert json.loads(text) == {"8": _config(16)}
    with pytest.raises(BundleExportError, match="two results for M=8 with N=256, K=256"):
        vllm_fp8_files([entries[1], entries[1]], "NVIDIA H100")


def test_fused_moe_tma_configs_are_left_out_of_vllms_files() -> None:
    entries = [
        (_problem(16), {**_config(16), "TMA": False}),
        (_problem(4096), {**_config(128), "TMA": True}),
    ]
    ((_, text),) = vllm_files(entries, "NVIDIA H100")
    assert json.loads(text) == {"16": _config(16)}
    assert vllm_skipped("fused_moe", entries) == [(_problem(4096), "TMA=True")]
    with pytest.raises(BundleExportError, match="none of the 1 fused_moe result"):
        vllm_files(entries[1:], "NVIDIA H100")


@pytest.mark.parametrize("gemm", ["up_silu", "down_sum"])
def test_fused_moe_epilogue_results_are_left_out_of_vllms_files(gemm: str) -> None:
    """vLLM's first GEMM writes gate and up, its second a row per slot; the activation and the
    top-k sum are passes of their own."""
    fused = {**_problem(64), "gemm": gemm}
    entries = [(_problem(16), _config(16)), (fused, {**_config(64), "TMA": True})]
    ((name, text),) = vllm_files(entries, "NVIDIA H100")
    assert "_down" not in name and json.loads(text) == {"16": _config(16)}
    assert vllm_skipped("fused_moe", entries) == [(fused, f"gemm={gemm}, TMA=True")]
    with pytest.raises(BundleExportError, match="gemm=up_silu or down_sum everywhere"):
        vllm_files(entries[1:], "NVIDIA H100")


def test_only_integer_values_reach_a_vllm_file() -> None:
    """A config's values come from database rows and vLLM passes them to its kernel launch: a
    best config with anything but an integer is refused in one line; a trial with one is never a
    fallback."""
    from orchestrator.export.vllm import vllm_fallback

    fp8 = {**_config(64), "BLOCK_SIZE_K": 128, "SPLIT_K": 1, "TMA": False}
    problem = {"M": 16, "N": 7168, "K": 2048}
    with pytest.raises(BundleExportError, match="non-integer value for vLLM"):
        vllm_fp8_files([(problem, {**fp8, "num_warps": "4; import os"})], "NVIDIA H100")
    with pytest.raises(BundleExportError, match="non-integer value for vLLM"):
        vllm_fp8_files([(problem, {**fp8, "num_stages": True})], "NVIDIA H100")
    trials = [({**fp8, "num_warps": "8"}, 0.1), ({**fp8, "BLOCK_SIZE_M": 64.0}, 0.2), (fp8, 0.3)]
    assert vllm_fallback("fp8_matmul", problem, trials) == {"config": fp8, "time_ms": 0.3}
