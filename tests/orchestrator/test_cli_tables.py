"""Tables at 80 columns: no line wider than the terminal, no header cut or split, no cell cut
short (…), a legend for short headers; --wide shows every column's full header."""

from __future__ import annotations

import pytest

from orchestrator.cli import main


def run(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(args)
    out, err = capsys.readouterr()
    assert done.value.code in (0, None), err
    return out


def headers(out: str) -> list[str]:
    """The header cells of the first table in ``out``, each joined over its lines."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    rows = [[c.strip() for c in line.strip("┃").split("┃")] for line in lines[top + 1 : bottom]]
    return [" ".join(filter(None, column)) for column in zip(*rows, strict=True)]


def assert_fits(out: str, width: int = 80) -> None:
    assert out.strip(), "nothing printed"
    assert max(len(line) for line in out.splitlines()) <= width, out
    assert "…" not in out, out


@pytest.mark.parametrize(
    ("args", "expected", "legend"),
    [
        (["kernels"], ["kernel", "description", "example"], None),
        (
            ["devices", "--known"],
            ["name", "arch", "SMs/CUs", "GB", "GB/s", "TFLOP/s"],
            "TFLOP/s = bf16 dense TFLOP/s",
        ),
        (
            ["devices"],
            ["#", "class", "arch", "backend", "GiB", "SMs/CUs", "triton", "torch"],
            "GiB = memory GiB",
        ),
    ],
)
def test_tables_fit_80_columns_with_whole_headers(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    expected: list[str],
    legend: str | None,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = run(capsys, args)
    assert_fits(out)
    assert headers(out) == expected, out
    if legend is not None:
        assert legend in " ".join(out.split()), out


def test_kernels_show_whole_attention_examples(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from search_spaces import get_spec

    monkeypatch.setenv("COLUMNS", "80")
    out = " ".join(run(capsys, ["kernels"]).replace("│", " ").split())
    for name in ("flash_attention", "paged_attention"):
        for key, value in get_spec(name).example.items():
            assert f"{key}={value}" in out, (name, key, out)


def test_wide_shows_every_column_at_full_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.device_table import KNOWN_CLASSES

    monkeypatch.setenv("COLUMNS", "80")
    out = run(capsys, ["devices", "--known", "--wide"])
    found = headers(out)
    assert len(found) == len(KNOWN_CLASSES[0].to_dict()), found
    assert "memory bandwidth GB/s" in found and "shared mem per block" in found
    assert "…" not in out and "more column(s)" not in out
    assert KNOWN_CLASSES[0].source in out  # the longest cell, on one line
