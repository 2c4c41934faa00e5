"""Landscape files and the replay runner (no GPU, no Ray)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from search_spaces.space import config_key
from workers.landscape import (
    Landscape,
    LandscapeError,
    LandscapeResult,
    read_landscape,
    write_landscape,
)
from workers.measurement import Outcome
from workers.replay import ReplayOptions, ReplayRunner

PROBLEM = {"M": 64, "N": 64, "K": 64, "dtype": "float16"}
FAST = {"BLOCK_M": 64, "num_warps": 4}
SLOW = {"BLOCK_M": 32, "num_warps": 4}
BROKEN = {"BLOCK_M": 16, "num_warps": 4}


@dataclass
class Req:
    kernel: str
    problem: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    vendor: str | None = None


def _landscape(name: str = "NVIDIA H200") -> Landscape:
    return Landscape(
        "matmul",
        "v1",
        PROBLEM,
        {"vendor": "nvidia", "name": name, "arch": "sm_90", "triton": "3.9.0"},
        [
            LandscapeResult(FAST, Outcome.OK, 0.5),
            LandscapeResult(SLOW, Outcome.OK, 2.0),
            LandscapeResult(BROKEN, Outcome.COMPILE_ERROR),
        ],
    )


@pytest.mark.parametrize("name", ["l.json", "l.json.gz"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    path = write_landscape(tmp_path / name, _landscape())
    back = read_landscape(path)
    assert back.to_dict() == _landscape().to_dict()
    assert back.best() == LandscapeResult(FAST, Outcome.OK, 0.5)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"format": "x"}, "format"),
        ({"results": [{"config": {}, "outcome": "ok", "time_ms": None}]}, "finite time_ms"),
        ({"results": [{"config": {}, "outcome": "meh"}]}, "unknown outcome"),
        ({"kernel": 3}, "'kernel'"),
    ],
)
def test_bad_files(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**_landscape().to_dict(), **doc}))
    with pytest.raises(LandscapeError, match=message):
        read_landscape(path)


def test_replay_answers_recorded_results(tmp_path: Path) -> None:
    runner = ReplayRunner([write_landscape(tmp_path / "l.json", _landscape())])
    assert runner.device_class.key == "replay:NVIDIA H200"
    assert runner.fingerprint.backend.value == "replay"
    assert runner.limits.shared_mem_per_block == 227 * 1024  # the known class's limits
    ok = runner.run(Req("matmul", PROBLEM, FAST))
    assert ok.outcome is Outcome.OK and ok.median_ms == 0.5
    assert runner.run(Req("matmul", PROBLEM, BROKEN)).outcome is Outcome.COMPILE_ERROR
    assert (
        runner.run(Req("matmul", PROBLEM, {"BLOCK_M": 128, "num_warps": 4})).outcome
        is Outcome.INVALID
    )
    missing = runner.run(Req("matmul", {**PROBLEM, "M": 128}, FAST))
    assert missing.outcome is Outcome.INVALID and "no landscape" in (missing.error or "")
    assert runner.covers("matmul", PROBLEM) and not runner.covers("rmsnorm", PROBLEM)
    assert [c[2] for c in runner.calls][:2] == [config_key(FAST), config_key(BROKEN)]


def test_noise_is_seeded(tmp_path: Path) -> None:
    path = write_landscape(tmp_path / "l.json", _landscape())
    a = ReplayRunner([path], ReplayOptions(noise=0.05, seed=1)).run(Req("matmul", PROBLEM, SLOW))
    b = ReplayRunner([path], ReplayOptions(noise=0.05, seed=1)).run(Req("matmul", PROBLEM, SLOW))
    c = ReplayRunner([path], ReplayOptions(noise=0.05, seed=2)).run(Req("matmul", PROBLEM, SLOW))
    assert a.samples_ms == b.samples_ms != c.samples_ms
    assert len(set(a.samples_ms)) > 1 and abs((a.median_ms or 0) - 2.0) < 0.3
    # A re-timing runner's stream: the same seed and call, other noise (a fresh process's).
    retime = ReplayOptions(noise=0.05, seed=1, stream="retime")
    d = ReplayRunner([path], retime).run(Req("matmul", PROBLEM, SLOW))
    assert d.samples_ms != a.samples_ms
    assert d.samples_ms == ReplayRunner([path], retime).run(Req("matmul", PROBLEM, SLOW)).samples_ms


def test_unknown_device_and_mixed_devices(tmp_path: Path) -> None:
    odd = write_landscape(tmp_path / "odd.json", _landscape("Some GPU 9000"))
    runner = ReplayRunner([odd])
    assert runner.device_class.key == "replay:Some GPU 9000"
    h200 = write_landscape(tmp_path / "h.json", _landscape())
    with pytest.raises(LandscapeError, match="share a device name"):
        ReplayRunner([odd, h200])


def test_a_parameter_added_after_the_recording_is_answered_at_its_default(tmp_path: Path) -> None:
    # The landscape's matmul configs lack TMA (recorded before the space had it): TMA=False, the
    # spec's default, is what ran then; TMA=True was never recorded.
    path = write_landscape(tmp_path / "l.json", _landscape())
    runner = ReplayRunner([path])
    default_tma = Req("matmul", PROBLEM, {**FAST, "TMA": False})
    assert runner.run(default_tma).median_ms == 0.5
    m = runner.run(Req("matmul", PROBLEM, {**FAST, "TMA": True}))
    assert m.outcome is Outcome.INVALID and "not in the recorded landscape" in (m.error or "")


def test_answers_repeat_whatever_the_key_order_and_values(tmp_path: Path) -> None:
    # The second and later calls for a request are answered from a memo of its keys: the same
    # answers as the first, the same config in another key order too, each call still logged.
    runner = ReplayRunner([write_landscape(tmp_path / "l.json", _landscape())])
    first = runner.run(Req("matmul", PROBLEM, {**FAST, "TMA": False}))
    again = runner.run(Req("matmul", dict(reversed(PROBLEM.items())), {"TMA": False, **FAST}))
    assert first.median_ms == again.median_ms == 0.5
    assert runner.run(Req("matmul", PROBLEM, {**FAST, "TMA": True})).outcome is Outcome.INVALID
    odd = runner.run(Req("matmul", PROBLEM, {**FAST, "extra": [1, 2]}))  # unhashable: not kept
    assert odd.outcome is Outcome.INVALID
    assert [c[2] for c in runner.calls] == [
        config_key({**FAST, "TMA": False}),
        config_key({**FAST, "TMA": False}),
        config_key({**FAST, "TMA": True}),
        config_key({**FAST, "extra": [1, 2]}),
    ]


def test_replay_answers_a_vendor_path_from_the_landscapes_vendor_times(tmp_path: Path) -> None:
    recorded = _landscape()
    recorded.vendor = {"torch.matmul": LandscapeResult({}, Outcome.OK, 0.6)}
    path = write_landscape(tmp_path / "l.json", recorded)
    assert read_landscape(path).to_dict() == recorded.to_dict()
    runner = ReplayRunner([path])
    found = runner.run(Req("matmul", PROBLEM, vendor="torch.matmul"))
    assert found.outcome is Outcome.OK and found.median_ms == 0.6
    missing = runner.run(Req("matmul", PROBLEM, vendor="cublaslt"))
    assert missing.outcome is Outcome.INVALID
    assert missing.error == "no vendor time recorded in the landscape"
    assert runner.calls == []  # configs only
    bare = ReplayRunner([write_landscape(tmp_path / "bare.json", _landscape())])
    assert bare.run(Req("matmul", PROBLEM, vendor="torch.matmul")).outcome is Outcome.INVALID


def test_replay_names_its_device_as_detection_does(tmp_path: Path) -> None:
    generic = _landscape("AMD Radeon Graphics")
    generic.device.update(vendor="amd", arch="gfx942")
    runner = ReplayRunner([write_landscape(tmp_path / "amd.json", generic)])
    assert runner.device_class.key == "replay:AMD Instinct MI300X"
