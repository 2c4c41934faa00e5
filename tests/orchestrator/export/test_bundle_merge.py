"""``pull``'s merge with the bundle already in the folder: newer measurement per key wins, keys
only the file has stay, the digest is fresh; other versions and broken files are replaced; files
are written whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.export.merge import merge_documents, merge_into_folder, write_atomically
from search_spaces.bundle import bundle_digest, bundle_from_dict

EARLY, LATE = "2025-01-01T00:00:00+00:00", "2025-06-01T00:00:00+00:00"


def _entry(n: int, block: int, at: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"problem": {"n": n}, "config": {"BLOCK": block}, "time_ms": 1.0}
    if at is not None:
        entry["updated_at"] = at
    return entry


def _doc(*entries: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": "tunefleet-bundle/1",
        "kernel": "app.scale",
        "kernel_version": version,
        "device_class": "cpu",
        "triton_minor": "3.0",
        "objective": "kernel",
        "default": {"BLOCK": 64},
        "entries": list(entries),
    }
    doc["digest"] = bundle_digest(doc)
    return doc


def _configs(doc: dict[str, Any]) -> dict[int, int]:
    return {e["problem"]["n"]: e["config"]["BLOCK"] for e in doc["entries"]}


def test_the_newer_measurement_per_key_wins_and_old_keys_stay() -> None:
    old = _doc(_entry(100, 64, EARLY), _entry(200, 64, LATE), _entry(300, 64, None))
    new = _doc(_entry(100, 128, LATE), _entry(200, 128, EARLY), _entry(300, 128, EARLY))
    new["entries"].append(_entry(50, 128, LATE))
    merged, account = merge_documents(old, new)
    # 100: pulled is newer; 200: the file's is newer; 300: a stamp beats none; 50: only pulled
    assert _configs(merged) == {50: 128, 100: 128, 200: 64, 300: 128}
    assert account == "kept 0 key(s) only it had and 1 newer measurement(s) of it"
    assert [e["problem"]["n"] for e in merged["entries"]] == [100, 200, 300, 50]  # key order
    assert list(merged)[-1] == "digest"
    assert bundle_from_dict(merged).digest == merged["digest"]


def test_a_tie_goes_to_the_pulled_entry_and_keys_only_the_file_has_are_kept() -> None:
    merged, account = merge_documents(
        _doc(_entry(100, 64, LATE), _entry(500, 64, None)), _doc(_entry(100, 128, LATE))
    )
    assert _configs(merged) == {100: 128, 500: 64}
    assert account.startswith("kept 1 key(s) only it had")


def test_pull_into_a_folder_merges_replaces_or_writes(tmp_path: Path) -> None:
    name = "app.scale-cpu-triton3.0.json"
    pulled = [(name, json.dumps(_doc(_entry(100, 128, LATE))))]
    files, notes = merge_into_folder(pulled, tmp_path)
    assert files == pulled and notes == []  # nothing there yet

    (tmp_path / name).write_text(json.dumps(_doc(_entry(500, 64, EARLY))))
    ((_, text),), notes = merge_into_folder(pulled, tmp_path)
    assert _configs(json.loads(text)) == {100: 128, 500: 64}
    assert notes == [
        f"merged into {tmp_path / name}: "
        + "kept 1 key(s) only it had and 0 newer measurement(s) of it"
    ]

    (tmp_path / name).write_text(json.dumps(_doc(_entry(500, 64, EARLY), version="v0")))
    files, notes = merge_into_folder(pulled, tmp_path)
    assert files == pulled and notes == [
        f"replaced {tmp_path / name}: it held kernel_version 'v0', not 'v1'"
    ]

    tampered = _doc(_entry(500, 64, EARLY))
    tampered["entries"][0]["config"]["BLOCK"] = 32
    (tmp_path / name).write_text(json.dumps(tampered))
    files, notes = merge_into_folder(pulled, tmp_path)
    assert files == pulled and "it was not a valid bundle" in notes[0] and "digest" in notes[0]


def test_files_are_written_through_a_renamed_temporary(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text("old")
    paths = write_atomically([("a.json", "one"), ("b.json", "two")], tmp_path / ".")
    assert [p.read_text() for p in paths] == ["one", "two"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
