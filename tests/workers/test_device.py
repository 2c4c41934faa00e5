"""Device names, known classes and fingerprints."""

from __future__ import annotations

import pytest

from search_spaces import MathRate, Vendor
from tests.gpu import needs_gpu
from workers.device import Backend, Fingerprint, detect, normalize_arch, normalize_name
from workers.device_table import (
    KNOWN_CLASSES,
    canonical_class_key,
    lookup,
    parse_class,
    roofline_floor_s,
)
from workers.errors import DeviceError, UnknownDeviceClass

GIB = 2**30


@pytest.mark.parametrize(
    ("raw", "arch", "expected"),
    [
        ("NVIDIA H200", "sm_90", "NVIDIA H200"),
        ("NVIDIA H100 80GB HBM3", "sm_90", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA A100-SXM4-80GB", "sm_80", "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA A100-SXM4-40GB", "sm_80", "NVIDIA A100-SXM4-40GB"),
        ("NVIDIA B200", "sm_100", "NVIDIA B200"),
        ("NVIDIA GeForce RTX 4090", "sm_89", "NVIDIA GeForce RTX 4090"),
        ("  NVIDIA   H200 ", None, "NVIDIA H200"),
        (" AMD Instinct MI300X ", "gfx942", "AMD Instinct MI300X"),
        ("AMD Instinct MI250X/MI250", "gfx90a", "AMD Instinct MI250X"),
        ("AMD Instinct MI325X", "gfx942", "AMD Instinct MI325X"),
        ("", "gfx942:sramecc+:xnack-", "AMD Instinct MI300X"),
        ("AMD Radeon Graphics", "gfx942", "AMD Instinct MI300X"),
        ("AMD Radeon Graphics", "gfx1100", "AMD gfx1100"),
    ],
)
def test_normalize_name(raw: str, arch: str | None, expected: str) -> None:
    assert normalize_name(raw, arch) == expected


def test_normalize_name_uses_detected_values_to_disambiguate() -> None:
    assert normalize_name("", "gfx942", memory_bytes=256 * GIB) == "AMD Instinct MI325X"
    assert normalize_name("", "gfx942", memory_bytes=192 * GIB) == "AMD Instinct MI300X"
    # MI250 (104 CUs per GCD) reports the MI250X's name: it stays apart from the MI250X class.
    mi250 = normalize_name("AMD Instinct MI250X/MI250", "gfx90a", multiprocessors=104)
    assert mi250 == "AMD Instinct MI250X/MI250"
    assert normalize_arch("gfx90a:sramecc+:xnack-") == "gfx90a"


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("H200", "NVIDIA H200"),
        ("h200", "NVIDIA H200"),
        ("NVIDIA H200", "NVIDIA H200"),
        ("H100", "NVIDIA H100 80GB HBM3"),
        ("A100", "NVIDIA A100-SXM4-80GB"),
        ("MI300X", "AMD Instinct MI300X"),
        ("AMD Instinct MI300X", "AMD Instinct MI300X"),
        ("AMD-Instinct-MI300X-OAM", "AMD Instinct MI300X"),
        ("cpu", "cpu"),
    ],
)
def test_lookup_aliases(alias: str, name: str) -> None:
    assert lookup(alias).name == name


def test_unknown_class_lists_known_names() -> None:
    with pytest.raises(UnknownDeviceClass) as info:
        lookup("V100")
    message = str(info.value)
    assert "'V100'" in message and "NVIDIA H200" in message and "\n" not in message


def test_table_rows_are_consistent() -> None:
    archs = {"NVIDIA": {"sm_80", "sm_90", "sm_100"}, "AMD": {"gfx90a", "gfx942"}}
    for row in KNOWN_CLASSES:
        assert row.limits.name == row.name and row.source
        assert list(row.to_dict()) == list(KNOWN_CLASSES[0].to_dict())
        if row.vendor is Vendor.NVIDIA:
            assert row.arch in archs["NVIDIA"] and row.limits.warp_size == 32
        if row.vendor is Vendor.AMD:
            assert row.arch in archs["AMD"] and row.limits.warp_size == 64
        if row.vendor is not Vendor.CPU:
            assert row.memory_bandwidth_gbs and row.bf16_tflops
    cpu, h200 = lookup("cpu").limits, lookup("H200").limits
    assert (cpu.shared_mem_per_block, cpu.warp_size) == (h200.shared_mem_per_block, 32)


def test_roofline_floor_s_is_the_slower_of_math_and_memory_at_the_peaks() -> None:
    h200 = lookup("H200")  # 989 TFLOP/s bf16, 4800 GB/s
    assert roofline_floor_s(989e12, 4800e9, h200) == 1.0  # balanced: both take one second
    assert roofline_floor_s(2 * 989e12, 4800e9, h200) == 2.0  # compute-bound
    assert roofline_floor_s(989e12, 3 * 4800e9, h200) == 3.0  # memory-bound
    assert roofline_floor_s(0.0, 4800e9, h200) == 1.0  # no math: bytes alone
    assert roofline_floor_s(989e12, 0.0, h200) is None  # no bytes: no floor
    assert roofline_floor_s(989e12, 4800e9, lookup("cpu")) is None  # no peaks
    assert roofline_floor_s(989e12, 4800e9, None) is None
    # FP8 math takes the FP8 peak (1,979 TFLOP/s dense on the H200): twice the bf16 rate.
    assert roofline_floor_s(1979e12, 4800e9, h200, MathRate.FP8) == 1.0  # balanced
    assert roofline_floor_s(2 * 1979e12, 4800e9, h200, MathRate.FP8) == 2.0  # compute-bound
    assert roofline_floor_s(1979e12, 3 * 4800e9, h200, MathRate.FP8) == 3.0  # memory-bound
    assert roofline_floor_s(2 * 989e12, 4800e9, h200, MathRate.BF16) == 2.0  # the default rate
    a100 = lookup("A100")  # no FP8 tensor cores
    assert roofline_floor_s(312e12, 2039e9, a100, MathRate.FP8) is None  # no FP8 peak
    assert roofline_floor_s(0.0, 2039e9, a100, MathRate.FP8) == 1.0  # no math: bytes alone
    assert roofline_floor_s(312e12, 2039e9, a100) == 1.0


def test_fp8_peaks_where_the_class_has_fp8_tensor_cores() -> None:
    no_fp8 = {"NVIDIA A100-SXM4-80GB", "AMD Instinct MI250X", "cpu"}
    for row in KNOWN_CLASSES:
        if row.name in no_fp8:
            assert row.fp8_tflops is None, row.name
        else:
            assert row.fp8_tflops and row.bf16_tflops and row.fp8_tflops > row.bf16_tflops
            assert "FP8" in row.source, row.name
        assert row.to_dict()["fp8_tflops"] == row.fp8_tflops


def test_parse_class_keys() -> None:
    assert parse_class("H200").key == "NVIDIA H200"
    replay = parse_class("replay:MI300X")
    assert replay.replay and replay.key == "replay:AMD Instinct MI300X"
    assert parse_class("cpu").key == "cpu"


def test_canonical_class_key_keeps_unknown_text() -> None:
    assert canonical_class_key(" h200 ") == "NVIDIA H200"
    assert canonical_class_key("replay:MI300X") == "replay:AMD Instinct MI300X"
    assert canonical_class_key(" Some Future GPU ") == "Some Future GPU"


def test_detect_auto_on_cpu_gives_the_interpreter() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    found = detect("auto")
    assert len(found) == 1
    fp = found[0]
    assert (fp.backend, fp.vendor, fp.name, fp.arch) == (
        Backend.INTERPRETER,
        Vendor.CPU,
        "cpu",
        "interpreter",
    )
    assert fp.device_class.key == "cpu"
    assert fp.limits() == lookup("cpu").limits
    assert fp.torch == torch.__version__.split("+")[0] or fp.torch == torch.__version__


def test_detect_rejects_replay_and_unknown_backends() -> None:
    with pytest.raises(DeviceError, match="replay"):
        detect("replay")
    with pytest.raises(DeviceError, match="choose one of"):
        detect("metal")


def make_fp(name: str = "NVIDIA H200", arch: str = "sm_90", **kw: object) -> Fingerprint:
    fields: dict[str, object] = {
        "vendor": Vendor.NVIDIA,
        "name": name,
        "arch": arch,
        "memory_bytes": 150 * 10**9,
        "multiprocessors": 132,
        "shared_mem_per_block": 232448,
        "driver": "cuda-driver 13.0",
        "runtime": "cuda 13.0",
        "triton": "3.6.0",
        "torch": "2.11.0",
        "backend": Backend.CUDA,
        "index": 1,
    }
    fields.update(kw)
    return Fingerprint(**fields)  # type: ignore[arg-type]


def test_fingerprint_round_trips() -> None:
    fp = make_fp()
    data = fp.to_dict()
    assert data["vendor"] == "nvidia" and data["backend"] == "cuda"
    assert Fingerprint.from_dict(data) == fp
    del data["arch"]
    with pytest.raises(DeviceError, match="arch"):
        Fingerprint.from_dict(data)


def test_fingerprint_class_and_limits() -> None:
    known = make_fp()
    assert known.device_class.key == "NVIDIA H200"
    assert known.limits() == lookup("H200").limits
    unknown = make_fp(
        "NVIDIA GeForce RTX 4090", "sm_89", multiprocessors=128, shared_mem_per_block=101376
    )
    limits = unknown.limits()
    assert (limits.name, limits.multiprocessors, limits.shared_mem_per_block) == (
        "NVIDIA GeForce RTX 4090",
        128,
        101376,
    )
    replay = make_fp(backend=Backend.REPLAY)
    assert replay.device_class.replay and replay.device_class.key == "replay:NVIDIA H200"


@needs_gpu
def test_detect_gpu_fingerprints() -> None:
    import torch

    found = detect("auto")
    assert [fp.index for fp in found] == list(range(torch.cuda.device_count()))
    fp = found[0]
    assert fp.backend in (Backend.CUDA, Backend.ROCM)
    assert fp.arch.startswith("sm_") or fp.arch.startswith("gfx")
    assert ":" not in fp.arch and fp.memory_bytes > 0 and fp.multiprocessors > 0
    assert fp.shared_mem_per_block >= 48 * 1024
    assert fp.runtime is not None and fp.runtime.split()[0] in ("cuda", "hip")
    assert Fingerprint.from_dict(fp.to_dict()) == fp
    limits = fp.limits()
    assert limits.multiprocessors == fp.multiprocessors
    assert limits.shared_mem_per_block == fp.shared_mem_per_block
