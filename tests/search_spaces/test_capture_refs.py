"""Captured kernels' path-free references and the capture index (hand-written captures, no
triton): the same source gives the same reference in any directory; malformed references and
paths are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from search_spaces.capture_file import CaptureError
from search_spaces.capture_refs import (
    INDEX_ENV,
    CapturedRef,
    indexed_directories,
    parse_ref,
    ref_of,
    register_capture,
)

NAME = "app.scale"
SOURCE = "0123456789abcdef"
REF = f"captured:{NAME}@{SOURCE}"


def _launch(n: int) -> dict[str, Any]:
    tensor = {"tensor": True, "shape": [n], "dtype": "float32", "stride": [1], "offset": 0}
    return {
        "record": "launch",
        "name": NAME,
        "key": [n, "torch.float32", "torch.float32"],
        "problem": {"n": n, "dtypes": "float32,float32"},
        "args": {"x_ptr": tensor, "out_ptr": tensor, "n": {"value": n}},
        "grid": [1],
    }


def write_capture(directory: Path, *keys: int, source: str = SOURCE) -> Path:
    """A capture of one kernel, ``app.scale`` (configs BLOCK 64 and 128), launched for ``keys``,
    as ``tunefleet capture`` writes it; ``directory`` (created) is returned."""
    directory.mkdir(parents=True, exist_ok=True)
    configs = [
        {"kwargs": {"BLOCK": b}, "num_warps": w, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
        for b, w in ((64, 2), (128, 4))
    ]
    kernel = {
        "record": "kernel",
        "name": NAME,
        "module": "app",
        "qualname": "scale",
        "file": None,
        "root": None,
        "source_hash": source,
        "arg_names": ["x_ptr", "out_ptr", "n", "BLOCK"],
        "constexprs": ["BLOCK"],
        "key": ["n"],
        "configs": configs,
    }
    lines = [kernel, *(_launch(n) for n in keys)]
    (directory / "capture-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return directory


def test_the_same_source_in_two_directories_has_one_reference(tmp_path: Path) -> None:
    (first,) = register_capture(write_capture(tmp_path / "a", 100))
    (second,) = register_capture(write_capture(tmp_path / "elsewhere" / "b", 300))
    assert ref_of(first, False) == ref_of(second, False) == REF
    assert ref_of(first, True) == f"{REF}+wide"
    (changed,) = register_capture(write_capture(tmp_path / "c", 100, source="fedcba9876543210"))
    assert ref_of(changed, False) != REF


def test_the_index_lists_a_kernels_captures_newest_first(tmp_path: Path) -> None:
    a, b = write_capture(tmp_path / "a", 100), write_capture(tmp_path / "b", 300)
    for directory in (a, b, a):
        register_capture(directory)
    ref = parse_ref(REF)
    assert indexed_directories(ref)[:2] == [a.resolve(), b.resolve()]
    (b / "capture-1-0.jsonl").unlink()
    b.rmdir()
    register_capture(a)
    assert b.resolve() not in indexed_directories(ref)


def test_the_index_file_is_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "own" / "captures.json"
    monkeypatch.setenv(INDEX_ENV, str(index))
    register_capture(write_capture(tmp_path / "a", 100))
    data = json.loads(index.read_text())
    assert data["kernels"] == {f"{NAME}@{SOURCE}": [str((tmp_path / "a").resolve())]}
    index.write_text("[1, 2]")
    with pytest.raises(CaptureError, match="is not a tunefleet-capture-index/1 file"):
        register_capture(tmp_path / "a")


def test_a_reference_parses_back() -> None:
    assert parse_ref(REF) == CapturedRef(NAME, SOURCE, False)
    assert parse_ref(f"{REF}+wide") == CapturedRef(NAME, SOURCE, True)
    assert str(parse_ref(f"{REF}+wide")) == f"{REF}+wide"


@pytest.mark.parametrize(
    "text",
    [
        f"captured:../../etc/passwd@{SOURCE}",
        f"captured:/etc/passwd@{SOURCE}",
        f"captured:app/scale@{SOURCE}",
        f"captured:a..b@{SOURCE}",
        f"captured:.hidden@{SOURCE}",
        "captured:app.scale@0123",
        f"captured:app.scale@{SOURCE.upper()}",
        f"captured:app.scale@{SOURCE}+wider",
        f"captured:app.scale@{SOURCE}\n",
        "captured:" + "a" * 300 + f"@{SOURCE}",
    ],
)
def test_paths_and_malformed_references_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(CaptureError, match="is not a captured kernel reference") as caught:
        parse_ref(text)
    assert "\n" not in str(caught.value)
