"""T4 output (record's landscape and pull's bundles) against Kernel Tuner's vendored schema, read
back by the replay device."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from orchestrator.export.t4 import bundles_to_t4, landscape_t4, write_json
from search_spaces.registry import get_spec
from search_spaces.space import Vendor
from workers.landscape import Landscape, LandscapeResult, read_landscape
from workers.measurement import Outcome
from workers.replay import ReplayOptions, ReplayRunner
from workers.runner import TrialRequest

SCHEMA = json.loads((Path(__file__).parent / "t4_schema" / "results-schema.json").read_text())
PROBLEM = {"M": 16, "N": 16, "K": 16, "dtype": "float16"}


def _landscape() -> Landscape:
    spec = get_spec("matmul")
    first = spec.default_config(Vendor.NVIDIA)
    other = {**first, "num_warps": 8 if first["num_warps"] != 8 else 4}
    device = {"name": "NVIDIA H200", "vendor": "nvidia", "arch": "sm_90"}
    return Landscape(
        "matmul",
        spec.version_hash(),
        dict(PROBLEM),
        device,
        [LandscapeResult(first, Outcome.OK, 0.5), LandscapeResult(other, Outcome.COMPILE_TIMEOUT)],
    )


def test_record_t4_is_valid_and_replays(tmp_path: Path) -> None:
    landscape = _landscape()
    doc = landscape_t4(landscape)
    jsonschema.validate(doc, SCHEMA)
    path = write_json(tmp_path / "run.t4.json", doc)
    back = read_landscape(path)
    assert back.problem == PROBLEM and back.kernel == "matmul"
    assert [(r.config, r.outcome, r.time_ms) for r in back.results] == [
        (r.config, r.outcome, r.time_ms) for r in landscape.results
    ]
    replay = ReplayRunner([path], ReplayOptions(samples=3))
    fast, slow = (replay.run(TrialRequest("matmul", PROBLEM, r.config)) for r in back.results)
    assert fast.outcome is Outcome.OK and fast.median_ms == 0.5
    assert slow.outcome is Outcome.COMPILE_TIMEOUT


def test_pull_t4_is_valid(tmp_path: Path) -> None:
    bundle = {
        "format": "tunefleet-bundle/1",
        "kernel": "matmul",
        "kernel_version": "v",
        "device_class": "cpu",
        "environment": {"triton": "3.9.0"},
        "default": {},
        "entries": [{"problem": PROBLEM, "config": {"BLOCK_M": 16}, "time_ms": 0.2, "job": 1}],
    }
    native = tmp_path / "matmul-cpu-triton3.9.json"
    native.write_text(json.dumps(bundle))
    (path,) = bundles_to_t4([native], tmp_path / "t4")
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["results"][0]["configuration"] == {"BLOCK_M": 16}
    assert doc["results"][0]["problem"] == PROBLEM


def test_pull_t4_records_the_vendor_measurement_as_its_own_result(tmp_path: Path) -> None:
    entry = {
        "problem": PROBLEM,
        "backend": "vendor",
        "vendor": "torch.matmul",
        "config": {"BLOCK_M": 16},
        "time_ms": 0.2,
        "triton_ms": 0.25,
        "vendor_ms": 0.2,
        "noise": 0.01,
    }
    bundle = {
        "format": "tunefleet-bundle/1",
        "kernel": "matmul",
        "device_class": "cpu",
        "default": {},
        "entries": [entry],
    }
    native = tmp_path / "matmul-cpu-triton3.9.json"
    native.write_text(json.dumps(bundle))
    (path,) = bundles_to_t4([native], tmp_path / "t4")
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SCHEMA)
    triton, vendor = doc["results"]
    assert triton["configuration"] == {"BLOCK_M": 16} and triton["times"]["runtimes"] == [0.25]
    assert (triton["tunefleet_backend"], triton["tunefleet_chosen"]) == ("triton", False)
    assert vendor["configuration"] == {"vendor": "torch.matmul"}
    assert vendor["times"]["runtimes"] == [0.2] and vendor["problem"] == PROBLEM
    assert (vendor["tunefleet_backend"], vendor["tunefleet_chosen"]) == ("vendor", True)
