"""Bundles: export from the database, and the deployment-side lookup (exact, nearest, default)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest

from db import BestBackend, Database, Objective, repository
from orchestrator.errors import BundleExportError
from orchestrator.export.bundle import BundleFormat, export
from search_spaces.bundle import (
    BUNDLE_FORMAT,
    BundleError,
    Decision,
    bundle_digest,
    bundle_from_dict,
    load_bundle,
    tuned,
)
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec

DEFAULT = {"BLOCK_M": 64}


def _bundle() -> dict[str, object]:
    def entry(m: int, dtype: str, block: int) -> dict[str, object]:
        return {
            "problem": {"M": m, "N": 4096, "dtype": dtype},
            "config": {"BLOCK_M": block},
            "time_ms": 1.0,
            "job": 1,
        }

    return {
        "format": BUNDLE_FORMAT,
        "kernel": "matmul",
        "kernel_version": "v",
        "device_class": "NVIDIA H200",
        "default": DEFAULT,
        "entries": [
            entry(16, "float16", 16),
            entry(1024, "float16", 128),
            entry(4096, "bfloat16", 256),
        ],
    }


def test_lookup_exact_nearest_default() -> None:
    b = bundle_from_dict(_bundle())
    assert b.resolve({"M": 1024, "N": 4096, "dtype": "float16"}) == ("exact", {"BLOCK_M": 128})
    # log2 distance: 128 is 3 from 16 and 3 from 1024 -> tie, the first entry wins
    assert b.resolve({"M": 128, "N": 4096, "dtype": "float16"}) == ("nearest", {"BLOCK_M": 16})
    assert b.resolve({"M": 256, "N": 4096, "dtype": "float16"}) == ("nearest", {"BLOCK_M": 128})
    # dtype must match: the only bfloat16 entry is used however far its M is
    assert b.resolve({"M": 1, "N": 4096, "dtype": "bfloat16"}) == ("nearest", {"BLOCK_M": 256})
    # no entry with this dtype, or different fields -> the default
    assert b.resolve({"M": 16, "N": 4096, "dtype": "float32"}) == ("default", DEFAULT)
    assert b.resolve({"M": 16, "dtype": "float16"}) == ("default", DEFAULT)
    looked = b.lookup({"M": 16, "N": 4096, "dtype": "float16"})
    looked["BLOCK_M"] = 0  # a copy: the bundle is not changed
    assert b.lookup({"M": 16, "N": 4096, "dtype": "float16"}) == {"BLOCK_M": 16}


def test_decorator_passes_config_and_caller_wins(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_bundle()))

    @tuned(path, key=lambda m, n, dtype="float16", **_: {"M": m, "N": n, "dtype": dtype})
    def launch(m: int, n: int, dtype: str = "float16", BLOCK_M: int = 0) -> int:
        return BLOCK_M

    assert launch(1024, 4096) == 128
    assert launch(16, 4096, BLOCK_M=32) == 32
    assert launch(8, 8, dtype="float32") == 64


def test_lookup_is_fast_and_imports_nothing_heavy(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_bundle()))
    code = (
        "import sys, time; from search_spaces.bundle import load_bundle\n"
        f"b = load_bundle({str(path)!r}); p = {{'M': 1024, 'N': 4096, 'dtype': 'float16'}}\n"
        "b.lookup(p); t = time.perf_counter()\n"
        "for _ in range(10000): b.lookup(p)\n"
        "print((time.perf_counter() - t) / 10000 * 1e6)\n"
        "print(sorted(m for m in ('torch', 'triton', 'ray', 'optuna', 'sqlalchemy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert float(out[0]) < 50.0  # microseconds per cached lookup
    assert out[1] == "[]"


def test_bad_bundles(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        load_bundle(tmp_path / "none.json")
    with pytest.raises(BundleError, match="format"):
        bundle_from_dict({**_bundle(), "format": "other/9"})
    with pytest.raises(BundleError, match=r"entries\[0\]"):
        bundle_from_dict({**_bundle(), "entries": [{"problem": {}}]})


SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
MID = {"M": 512, "N": 512, "K": 512, "dtype": "float16"}
BIG = {"M": 2048, "N": 2048, "K": 2048, "dtype": "float16"}
CFG = {
    "BLOCK_M": 128,
    "BLOCK_N": 128,
    "BLOCK_K": 64,
    "GROUP_M": 8,
    "SPLIT_K": 1,
    "num_warps": 8,
    "num_stages": 4,
}
SMALL_CFG = {**CFG, "BLOCK_M": 64}


def _store_one(
    database: Database,
    class_key: str,
    config: Mapping[str, Any],
    problem: Mapping[str, Any] | None = None,
    *,
    time_ms: float = 1.0,
    job: int | None = None,
    decision: repository.BestDecision | None = None,
) -> None:
    """A best config of the installed matmul for ``problem`` (default 64^3 float16) on a class,
    produced by ``job`` and decided by ``decision`` (default: none, a Triton win)."""
    problem = problem or {"M": 64, "N": 64, "K": 64, "dtype": "float16"}
    with database.session() as s:
        repository.upsert_best(
            s,
            "matmul",
            get_spec("matmul").version_hash(),
            problem_key(problem),
            repository.ensure_device_class(s, class_key, "nvidia", class_key, "sm_90"),
            "3.9",
            config,
            time_ms,
            None,
            job,
            None,
            decision=decision,
        )


def _jobs(database: Database, n: int) -> list[int]:
    """Ids of ``n`` new jobs of team ml on the installed matmul."""
    spec = get_spec("matmul")
    with database.session() as s:
        kernel_id = repository.ensure_kernel(s, "matmul", spec.version_hash(), spec.space.hash())
        return [repository.create_job(s, kernel_id, {"kernel": "matmul"}, "ml") for _ in range(n)]


def _store(database: Database) -> tuple[dict[str, Any], dict[str, Any]]:
    for problem, config in ((SMALL, SMALL_CFG), (BIG, CFG)):
        _store_one(database, "NVIDIA H200", config, problem)
    return SMALL, BIG


def test_export_native_round_trips_to_lookup(database: Database, tmp_path: Path) -> None:
    _, big = _store(database)
    (path,) = export(database, "matmul", tmp_path / "out", ["NVIDIA H200"])
    b = load_bundle(path)
    assert (b.kernel, b.device_class, b.meta["triton_minor"]) == ("matmul", "NVIDIA H200", "3.9")
    assert b.kernel_version == get_spec("matmul").version_hash()
    assert b.resolve(big)[0] == "exact" and b.lookup(big)["BLOCK_M"] == 128
    assert (
        b.resolve({**big, "M": 1024})[0] == "nearest"
        and b.lookup({**big, "M": 1024, "N": 1024, "K": 1024})["BLOCK_M"] == 128
    )
    assert b.default == get_spec("matmul").default_config(__import__("search_spaces").Vendor.NVIDIA)


def test_export_takes_one_objective(database: Database, tmp_path: Path) -> None:
    small, big = _store(database)
    graph_cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4}
    with database.session() as s:
        repository.upsert_best(
            s,
            "matmul",
            get_spec("matmul").version_hash(),
            problem_key(big),
            repository.ensure_device_class(s, "NVIDIA H200", "nvidia", "NVIDIA H200", "sm_90"),
            "3.9",
            graph_cfg,
            0.9,
            None,
            None,
            None,
            Objective.GRAPH,
        )
    (kernel_path,) = export(database, "matmul", tmp_path / "out")
    (graph_path,) = export(database, "matmul", tmp_path / "out", objective=Objective.GRAPH)
    assert graph_path.name == kernel_path.name.replace(".json", "-graph.json")
    graph = load_bundle(graph_path)
    assert graph.meta["objective"] == "graph" and len(graph.entries) == 1
    assert graph.lookup(big) == graph_cfg
    assert load_bundle(kernel_path).lookup(big)["GROUP_M"] == 8
    assert load_bundle(kernel_path).resolve(small)[0] == "exact"


def test_export_triton_format_is_loadable(database: Database, tmp_path: Path) -> None:
    _store(database)
    (path,) = export(database, "matmul", tmp_path / "out", fmt=BundleFormat.TRITON)
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    configs, best = namespace["CONFIGS"], namespace["BEST"]
    assert namespace["KEY"] == ["M", "N", "K", "dtype"]
    chosen = configs[best[(2048, 2048, 2048, "float16")]]  # type: ignore[index]
    assert chosen.kwargs["BLOCK_M"] == 128 and chosen.num_warps == 8 and chosen.num_stages == 4


def _run_exported(code: str, path: Path, cwd: Path) -> str:
    """The stdout of ``code`` run by a fresh interpreter in ``cwd`` with the exported module
    ``path`` as its argument; asserts that it succeeded and that running the module ran
    nothing else (no PWNED file)."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    assert not (cwd / "PWNED").exists()  # importing the file ran nothing
    assert done.returncode == 0, done.stderr
    return done.stdout


HOSTILE_CLASS = 'H200"""\n__import__("os").system("touch PWNED")\n"""'


def test_export_triton_writes_database_text_as_literals_only(
    database: Database, tmp_path: Path
) -> None:
    # A device class name (from a replay landscape or anyone who writes to a shared database)
    # and config keys and values built to break out of the docstring or a string literal.
    config = {
        "BLOCK_M": 64,
        "x'): __import__('os').system('touch PWNED') #": 1,
        "num_warps": "'); __import__('os').system('touch PWNED'); ('",
    }
    _store_one(database, HOSTILE_CLASS, config)
    out = tmp_path / "out"
    (path,) = export(database, "matmul", out, fmt=BundleFormat.TRITON)
    assert path.parent == out
    code = (
        "import runpy, sys; ns = runpy.run_path(sys.argv[1]); "
        "print(repr(ns['DEVICE_CLASS'])); print(sorted(ns['CONFIGS'][0].kwargs))"
    )
    printed = _run_exported(code, path, tmp_path)
    assert printed.splitlines()[0] == repr(HOSTILE_CLASS)
    assert "x'): __import__('os').system('touch PWNED') #" in printed


def test_export_triton_refuses_values_that_are_not_plain_data(
    database: Database, tmp_path: Path
) -> None:
    _store_one(database, "NVIDIA H200", {"BLOCK_M": float("nan")})
    with pytest.raises(BundleExportError, match="cannot write nan into a Python file"):
        export(database, "matmul", tmp_path / "out", fmt=BundleFormat.TRITON)
    assert list((tmp_path / "out").glob("*.py")) == []


def test_export_nothing_is_an_error(database: Database, tmp_path: Path) -> None:
    with pytest.raises(BundleExportError, match="run `tunefleet tune` first"):
        export(database, "matmul", tmp_path, ["NVIDIA B200"])


# ----------------------------------------------------------------------------- vendor entries

#: problem -> (config, backend, vendor, triton_ms, vendor_ms): the vendor path wins SMALL.
WINS: list[tuple[dict[str, Any], dict[str, Any], str, float, float]] = [
    (SMALL, SMALL_CFG, "vendor", 1.2, 1.0),
    (MID, CFG, "triton", 1.0, 1.1),
    (BIG, CFG, "triton", 1.0, 1.5),
]


def _store_vendor_wins(database: Database, vendor: str = "torch.matmul") -> int:
    """The WINS rows of the installed matmul on NVIDIA H200, produced by one job of team ml,
    each written with its decision. Returns the job id."""
    (job,) = _jobs(database, 1)
    for problem, config, backend, triton_ms, vendor_ms in WINS:
        _store_one(
            database,
            "NVIDIA H200",
            config,
            problem,
            time_ms=vendor_ms if backend == "vendor" else triton_ms,
            job=job,
            decision=repository.BestDecision(
                BestBackend(backend), vendor, triton_ms, vendor_ms, noise=0.02
            ),
        )
    return job


def test_export_round_trips_vendor_decisions(database: Database, tmp_path: Path) -> None:
    job = _store_vendor_wins(database)
    (path,) = export(database, "matmul", tmp_path / "out")
    doc = json.loads(path.read_text())
    assert list(doc)[-1] == "digest" and doc["digest"] == bundle_digest(doc)
    entries = {problem_key(e["problem"]): e for e in doc["entries"]}
    small = entries[problem_key(SMALL)]
    assert datetime.fromisoformat(small.pop("updated_at")).tzinfo is not None
    assert small == {
        "problem": SMALL,
        "backend": "vendor",
        "vendor": "torch.matmul",
        "config": SMALL_CFG,
        "time_ms": 1.0,
        "triton_ms": 1.2,
        "vendor_ms": 1.0,
        "noise": 0.02,
        "job": job,
        "team": "ml",
    }
    assert entries[problem_key(BIG)]["backend"] == "triton"
    bundle = load_bundle(path, get_spec("matmul"))
    assert bundle.digest == doc["digest"]
    assert bundle.decide(SMALL) == Decision("vendor", SMALL_CFG, "torch.matmul", "exact")
    assert bundle.decide(BIG) == Decision("triton", CFG, "torch.matmul", "exact")
    # unseen shapes take the nearest entry's decision
    assert bundle.decide({**SMALL, "M": 128}).backend == "vendor"
    assert bundle.decide({**BIG, "M": 4096}).how == "nearest"
    assert bundle.decide({**BIG, "M": 4096}).backend == "triton"
    # ... but a Triton win carries over to another batch only: other weights keep the vendor path
    assert doc["batch_fields"] == ["M"]
    assert bundle.decide({**BIG, "N": 4096}) == Decision("vendor", CFG, "torch.matmul", "nearest")


def test_a_vendor_win_with_no_triton_config_exports_the_default(
    database: Database, tmp_path: Path
) -> None:
    """A cancelled job's study whose configs never ran ok but whose vendor path did is stored
    with no config (promote_stored has no spec); its entry carries the bundle's default, so the
    file loads and the decision keeps the vendor path."""
    decision = repository.BestDecision(BestBackend.VENDOR, "torch.matmul", None, 1.0)
    _store_one(database, "NVIDIA H200", {}, SMALL, decision=decision)
    (path,) = export(database, "matmul", tmp_path / "out")
    bundle = load_bundle(path, get_spec("matmul"))
    assert bundle.decide(SMALL) == Decision("vendor", bundle.default, "torch.matmul", "exact")


def test_export_refuses_a_vendor_win_without_a_path(database: Database, tmp_path: Path) -> None:
    for decision, refusal in (
        (repository.BestDecision(BestBackend.VENDOR, None, 1.2, 1.0), "name its vendor path"),
        (repository.BestDecision(cast(BestBackend, "cudnn"), "x"), "unknown backend 'cudnn'"),
    ):
        with pytest.raises(repository.InvalidRecord, match=refusal):
            _store_one(database, "NVIDIA H200", SMALL_CFG, SMALL, decision=decision)
    with pytest.raises(BundleExportError, match="run `tunefleet tune` first"):
        export(database, "matmul", tmp_path / "out")


HOSTILE_VENDOR = "'); __import__('os').system('touch PWNED'); ('"


def test_triton_module_names_vendor_wins_as_literals(database: Database, tmp_path: Path) -> None:
    _store_vendor_wins(database, vendor=HOSTILE_VENDOR)
    (path,) = export(database, "matmul", tmp_path / "out", fmt=BundleFormat.TRITON)
    text = path.read_text()
    assert "VENDOR maps the problems where the vendor path" in text
    code = (
        "import json, runpy, sys; ns = runpy.run_path(sys.argv[1]); "
        "c = ns['CONFIGS'][ns['BEST'][(256, 256, 256, 'float16')]]; "
        "print(json.dumps([[list(k), v] for k, v in ns['VENDOR'].items()])); "
        "print(c.kwargs['BLOCK_M'])"
    )
    vendor, block_m = _run_exported(code, path, tmp_path).splitlines()
    assert json.loads(vendor) == [[[256, 256, 256, "float16"], HOSTILE_VENDOR]]
    assert block_m == "64"  # BEST still names the vendor-won problem's fastest Triton config


def test_pull_json_reports_the_policy_worst_case(
    database: Database, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.commands.cli import main

    _store_vendor_wins(database)
    with pytest.raises(SystemExit) as done:
        main(["pull", "matmul", "--out", str(tmp_path / "b"), "--db", db_url, "--json"])
    out, err = capsys.readouterr()
    assert done.value.code in (0, None), err
    pulled = json.loads(out)
    (path,) = pulled["files"]
    (report,) = pulled["bundles"]
    assert report["digest"] == load_bundle(path).digest
    assert (report["entries"], report["triton"], report["vendor"], report["measured"]) == (
        3,
        2,
        1,
        3,
    )
    # vendor_ms / chosen_ms: SMALL 1.0 (vendor chosen), MID 1.1, BIG 1.5
    assert report["worst_vs_vendor"] == 1.0 and report["worst_problem"] == SMALL
    assert report["geomean_vs_vendor"] == pytest.approx((1.0 * 1.1 * 1.5) ** (1 / 3))
    shapes = {problem_key(row["problem"]): row for row in report["shapes"]}
    # leave-one-out: each shape's nearest other has other N and K, so a Triton decision there
    # does not carry over (batch fields: M): every left-out shape keeps the vendor path its own
    # study measured, 1.0x
    small, mid, big = (shapes[problem_key(p)] for p in (SMALL, MID, BIG))
    for row in (small, mid, big):
        assert (row["unseen_backend"], row["unseen_ratio"], row["unseen_exact"]) == (
            "vendor",
            1.0,
            True,
        )
    assert report["unseen_worst_vs_vendor"] == 1.0 and report["unseen_bounded"] == 0
    (line,) = err.splitlines()
    assert line.startswith("policy matmul NVIDIA H200: 2 triton, 1 vendor; vs vendor over 3")
    assert (
        "worst 1.000x at K=256,M=256,N=256,dtype=float16," in line
        and "unseen (leave-one-out) worst = 1.000x" in line
    )

    with pytest.raises(SystemExit):
        main(["pull", "matmul", "--out", str(tmp_path / "t"), "--db", db_url, "--format", "triton"])
    out, err = capsys.readouterr()
    assert out.strip().endswith(".py") and err.startswith("policy matmul NVIDIA H200")


def test_leave_one_out_follows_bundle_decide() -> None:
    import random

    from orchestrator.export.report import _left_out_decisions
    from search_spaces.bundle import Bundle, BundleEntry

    rng = random.Random(7)
    entries = [
        BundleEntry(
            {"M": rng.choice([1, 3, 16, 48, 64, 4096]), "N": rng.choice([64, 96, 4096]), "K": 64}
            | {"dtype": rng.choice(["float16", "bfloat16"]), "FLAG": rng.random() < 0.2},
            {"BLOCK_M": i + 1},
            backend=rng.choice(["triton", "vendor"]),
            vendor="torch.matmul",
        )
        for i in range(60)
    ]
    for batch_fields in (None, ("M",)):
        bundle = Bundle("matmul", "v", "c", {"BLOCK_M": 0}, entries, batch_fields=batch_fields)
        decisions = _left_out_decisions(bundle)
        for i, (entry, decision) in enumerate(zip(entries, decisions, strict=True)):
            others = Bundle(
                "matmul", "v", "c", {"BLOCK_M": 0}, entries[:i] + entries[i + 1 :],
                batch_fields=batch_fields,
            )  # fmt: skip
            assert decision == others.decide(entry.problem), entry.problem
        if batch_fields:  # the rule kept the vendor path somewhere a Triton entry was nearest
            assert any(d.how == "nearest" and d.backend == "vendor" for d in decisions)


def test_entries_of_a_cancelled_job_are_marked(database: Database, tmp_path: Path) -> None:
    from db import JobStatus

    done, cancelled = _jobs(database, 2)
    with database.session() as s:
        repository.set_job_status(s, cancelled, JobStatus.CANCELLED)
    for problem, job in ((SMALL, done), (BIG, cancelled)):
        _store_one(database, "NVIDIA H200", CFG, problem, job=job)
    (path,) = export(database, "matmul", tmp_path)
    entries = {problem_key(e["problem"]): e for e in json.loads(path.read_text())["entries"]}
    assert entries[problem_key(BIG)]["cancelled"] is True
    assert "cancelled" not in entries[problem_key(SMALL)]
    loaded = {problem_key(e.problem): e for e in load_bundle(path).entries}
    assert loaded[problem_key(BIG)].cancelled and not loaded[problem_key(SMALL)].cancelled


def test_leave_one_out_across_batch_fields_is_a_bound_on_another_config() -> None:
    from orchestrator.export.report import policy_report
    from search_spaces.bundle import Bundle, BundleEntry

    def entry(m: int, block: int, vendor_ms: float) -> BundleEntry:
        problem = {"M": m, "N": 256, "K": 256, "dtype": "float16"}
        return BundleEntry(
            problem, {"BLOCK_M": block}, 1.0, backend="triton", triton_ms=1.0, vendor_ms=vendor_ms
        )

    bundle = Bundle(
        "matmul", "v", "c", {"BLOCK_M": 0}, [entry(64, 16, 1.2), entry(128, 32, 1.1)],
        batch_fields=("M",),
    )  # fmt: skip
    report = policy_report(bundle)
    rows = {row["problem"]["M"]: row for row in report["shapes"]}
    # only M differs: the other entry's Triton config carries over, not timed on this shape
    assert (rows[64]["unseen_backend"], rows[64]["unseen_exact"]) == ("triton", False)
    assert rows[64]["unseen_ratio"] == pytest.approx(1.2)
    assert report["unseen_bounded"] == 2 and report["unseen_worst_vs_vendor"] == pytest.approx(1.1)
