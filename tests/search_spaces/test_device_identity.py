"""Device identity: one normalisation, one key form, one rule for "same class"."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from search_spaces import device_identity
from search_spaces.bundle import BundleError, bundle_from_dict
from search_spaces.device_identity import (
    KNOWN_NAMES,
    DeviceClass,
    DeviceIdentityError,
    Vendor,
    canonical_key,
    classify,
    gpu_class,
    interpreter_class,
    same_class,
)

GIB = 2**30
#: What ROCm's torch reports for an MI300X whose product name it does not know.
GENERIC_MI300X = SimpleNamespace(
    name="AMD Radeon Graphics",
    gcnArchName="gfx942:sramecc+:xnack-",
    total_memory=192 * GIB,
    multi_processor_count=304,
)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("NVIDIA H200", "nvidia h200", True),
        ("h200", "NVIDIA H200", True),
        ("  NVIDIA   H200 ", "H200 SXM", True),
        ("MI300X", "AMD-Instinct-MI300X-OAM", True),
        ("replay:h200", "replay:NVIDIA H200", True),
        ("replay:NVIDIA H200", "NVIDIA H200", False),
        ("NVIDIA H200", "NVIDIA H100 80GB HBM3", False),
        ("MI300X", "MI325X", False),
        ("interpreter", "cpu", True),
        ("NVIDIA GeForce RTX 4090", "nvidia  geforce rtx 4090", True),
        ("NVIDIA A100-SXM4-40GB", "A100", False),
        ("AMD Radeon Graphics", "AMD Instinct MI300X", False),
    ],
)
def test_same_class_rule(a: str, b: str, same: bool) -> None:
    assert same_class(a, b) is same
    assert same_class(b, a) is same
    assert same_class(DeviceClass.parse(a), b) is same


@pytest.mark.parametrize("row", KNOWN_NAMES, ids=lambda r: r.name)
def test_known_classes_round_trip_through_their_key(row: device_identity.KnownName) -> None:
    for replay in (False, True):
        cls = DeviceClass(row.vendor, row.name, row.arch, replay)
        assert DeviceClass.parse(cls.key) == cls
        assert canonical_key(cls.key) == cls.key
        for alias in row.aliases:
            assert DeviceClass.parse(alias) == DeviceClass(row.vendor, row.name, row.arch)


def test_detected_classes_round_trip_through_their_key() -> None:
    rtx = classify(Vendor.NVIDIA, " NVIDIA GeForce  RTX 4090", "sm_89")
    assert rtx.key == "NVIDIA GeForce RTX 4090"
    parsed = DeviceClass.parse(rtx.key)
    # A key carries no arch: an unknown class reads back with its name, vendor and arch "".
    assert (parsed.key, parsed.vendor, parsed.arch) == (rtx.key, Vendor.NVIDIA, "")
    assert same_class(parsed, rtx)
    navi = classify(Vendor.AMD, "AMD Radeon Graphics", "gfx1100")
    assert navi == DeviceClass(Vendor.AMD, "AMD gfx1100", "gfx1100")
    assert DeviceClass.parse(navi.key) == navi
    mi250 = classify(Vendor.AMD, "AMD Instinct MI250X/MI250", "gfx90a", multiprocessors=104)
    assert mi250.key == "AMD Instinct MI250X/MI250" and not same_class(mi250, "MI250X")
    cpu = interpreter_class()
    assert (cpu.key, cpu.interpreter) == ("cpu", True)
    assert DeviceClass.parse("cpu") == cpu == classify(Vendor.CPU, "anything", "x86")
    assert interpreter_class(replay=True).key == "replay:cpu"


def test_gpu_class_reads_torch_properties() -> None:
    assert gpu_class(GENERIC_MI300X, hip=True) == DeviceClass(
        Vendor.AMD, "AMD Instinct MI300X", "gfx942"
    )
    bigger = SimpleNamespace(**{**vars(GENERIC_MI300X), "total_memory": 256 * GIB})
    assert gpu_class(bigger, hip=True).name == "AMD Instinct MI325X"
    h200 = SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, total_memory=141 * 10**9, multi_processor_count=132
    )
    assert gpu_class(h200, hip=False) == DeviceClass(Vendor.NVIDIA, "NVIDIA H200", "sm_90")


@pytest.mark.parametrize("bad", ["", "   ", "replay:", "replay:  ", "H\x00200", "x" * 201, 7, None])
def test_bad_keys_raise_our_error(bad: object) -> None:
    with pytest.raises(DeviceIdentityError) as info:
        DeviceClass.parse(bad)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    with pytest.raises(DeviceIdentityError):
        same_class(bad, "H200")  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


def test_a_bundle_whose_class_is_no_key_is_refused() -> None:
    doc = {"format": "tunefleet-bundle/1", "kernel": "matmul", "default": {"BLOCK_M": 64}}
    assert bundle_from_dict({**doc, "entries": [], "device_class": ""}).device_class == ""
    with pytest.raises(BundleError, match="control character"):
        bundle_from_dict({**doc, "entries": [], "device_class": "NVIDIA\x01H200"})


def test_a_job_naming_no_class_is_refused() -> None:
    from orchestrator.errors import JobSpecError
    from orchestrator.run.jobs import JobSpec

    with pytest.raises(JobSpecError, match="device_classes: device class is empty"):
        JobSpec.from_mapping(
            {
                "kernel": "matmul",
                "problems": ["M=64,N=64,K=64,dtype=float16"],
                "device_classes": [" "],
            }
        )


def test_the_module_imports_only_the_standard_library() -> None:
    path = Path(device_identity.__file__)
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module is not None
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported
    # Loaded as a lone file with no site-packages (-S -I): a deployment can carry it alone.
    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('device_identity', {str(path)!r})\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['device_identity'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "assert mod.canonical_key('mi300x') == 'AMD Instinct MI300X'\n"
        "foreign = [n for n in sys.modules if n.split('.')[0] not in sys.stdlib_module_names]\n"
        "print(sorted(set(foreign) - {'device_identity', '__main__'}))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-I", "-c", probe], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def _fake_rocm_torch(monkeypatch: pytest.MonkeyPatch, props: SimpleNamespace) -> None:
    """torch as a ROCm build with one GPU whose properties are ``props``."""
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.version, "hip", "6.2.41133", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: props.name)


def test_generic_amd_name_is_stored_and_looked_up_under_one_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU that reports "AMD Radeon Graphics": the worker stores its results under the table
    name, ``pull`` writes the bundle under it, and the drop-in on that GPU finds the bundle."""
    from db import Database, repository
    from orchestrator.export.bundle import export
    from search_spaces import triton_autotune
    from search_spaces.bundle_env import VersionPolicy
    from search_spaces.problem import problem_key
    from search_spaces.registry import get_spec
    from workers.device import detect
    from workers.device_table import lookup

    _fake_rocm_torch(monkeypatch, GENERIC_MI300X)
    (fingerprint,) = detect("rocm")
    stored = fingerprint.device_class
    assert (stored.key, stored.arch) == ("AMD Instinct MI300X", "gfx942")

    database = Database(f"sqlite:///{tmp_path / 'best.db'}")
    database.ensure_schema()
    spec = get_spec("matmul")
    limits = lookup(stored.key).limits
    with database.session() as s:  # what the ledger writes for this worker's class
        class_id = repository.ensure_device_class(
            s, stored.key, stored.vendor.value, stored.name, stored.arch, stored.replay
        )
        problem = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
        repository.upsert_best(
            s,
            "matmul",
            spec.version_hash(),
            problem_key(spec.validate_problem(problem)),
            class_id,
            "3.6",
            spec.default_for(limits),
            0.5,
            None,
            None,
            None,
        )
    (path,) = export(database, "matmul", tmp_path / "bundles", device_classes=["mi300x"])
    assert json.loads(path.read_text())["device_class"] == "AMD Instinct MI300X"

    assert triton_autotune._device_class() == stored
    serving = triton_autotune.Serving(
        "matmul", "", tmp_path / "bundles", VersionPolicy.USE, False, None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # versions differ from this machine's
        chosen = serving.bundle()
    assert chosen is not None and chosen.device_class == "AMD Instinct MI300X"

    # Another GPU of the same arch (an MI325X, more memory) gets no bundle of the MI300X.
    monkeypatch.setattr(triton_autotune, "_device_class", lambda: DeviceClass.parse("MI325X"))
    other = triton_autotune.Serving(
        "matmul", "", tmp_path / "bundles", VersionPolicy.USE, False, None
    )
    with pytest.warns(RuntimeWarning, match="none for AMD Instinct MI325X"):
        assert other.bundle() is None


def test_the_drop_in_under_the_interpreter_is_the_cpu_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from search_spaces import triton_autotune

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_autotune._device_class() == interpreter_class()
