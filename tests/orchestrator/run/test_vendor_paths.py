"""Vendor paths through a job: measured once per key outside the budget, answered from the
database afterwards, compared in promotion, reported when they fail (LocalPool, no Ray)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from rich.console import Console

from db import BestBackend, Database, TrialOutcome, repository
from db.models import Trial, VendorTrial
from orchestrator.app.jobs import job_summary
from orchestrator.app.summary import render, undecided
from orchestrator.run.driver import Driver, JobResult, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.progress import SilentReporter
from orchestrator.run.worker import WorkerPlan
from search_spaces.registry import get_spec
from tests.orchestrator.conftest import H200
from tests.workers.fake_specs import ref
from workers.landscape import LandscapeResult, read_landscape, write_landscape
from workers.measurement import Outcome

SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
BIG = {"M": 1024, "N": 1024, "K": 1024, "dtype": "float16"}


class Notes(SilentReporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def count(database: Database, model: type[Trial] | type[VendorTrial], job_id: int) -> int:
    with database.session(readonly=True) as s:
        return int(
            s.scalar(sa.select(sa.func.count()).select_from(model).where(model.job_id == job_id))
            or 0
        )


def best_rows(database: Database, kernel: str = "matmul") -> list[repository.BestRecord]:
    version = get_spec(kernel).version_hash()
    with database.session(readonly=True) as s:
        return repository.get_best(s, get_spec(kernel).name, kernel_version=version)


@pytest.fixture
def vendor_pool(landscapes: dict[str, list[Path]], tmp_path: Path) -> Iterator[LocalPool]:
    """One replay worker of the H200 landscapes with torch.matmul recorded: far faster than any
    config on the small problem, far slower on the big one."""
    paths = []
    for n, path in enumerate(landscapes[H200]):
        land = read_landscape(path)
        best = land.best()
        assert best is not None and best.time_ms is not None
        factor = 0.01 if land.problem == SMALL else 100.0
        land.vendor = {"torch.matmul": LandscapeResult({}, Outcome.OK, best.time_ms * factor)}
        paths.append(str(write_landscape(tmp_path / f"{n}.json", land)))
    pool = LocalPool([WorkerPlan("replay", tuple(paths))])
    yield pool
    pool.shutdown()


def test_a_job_measures_the_vendor_path_once_outside_the_budget_and_decides_per_key(
    vendor_pool: LocalPool, database: Database
) -> None:
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL, BIG], "trials": 6})
    first = Driver(database, vendor_pool, retime_rounds=2, poll_s=0.0).run(
        submit_job(database, spec, vendor_pool)
    )
    assert count(database, Trial, first.job_id) == 2 * 6  # the budget, vendor paths aside
    assert count(database, VendorTrial, first.job_id) == 2
    small, big = sorted(best_rows(database), key=lambda b: b.time_ms)
    assert (small.backend, small.vendor) == (BestBackend.VENDOR, "torch.matmul")
    assert small.time_ms == small.vendor_ms and small.triton_ms and small.triton_ms > small.time_ms
    assert small.config  # the best Triton config stays beside the vendor win
    assert big.backend is BestBackend.TRITON and big.vendor_ms and big.vendor_ms > big.time_ms
    assert big.triton_ms == big.time_ms and big.noise == 0.0 and big.default_ms
    winners = sorted(first.winners.values(), key=lambda w: w.time_ms)
    assert winners[0].speedup_vs_vendor == 1.0 and winners[0].backend is BestBackend.VENDOR
    assert winners[1].speedup_vs_vendor and winners[1].speedup_vs_vendor > 1.0

    second = Driver(database, vendor_pool, retime_rounds=2, poll_s=0.0).run(
        submit_job(database, spec, vendor_pool)
    )
    assert count(database, VendorTrial, second.job_id) == 0  # answered from the database
    assert count(database, Trial, second.job_id) == 2 * 6
    # Everything timed again alike: the incumbents hold. A Triton config keeps its producer; a
    # vendor path's row takes this job's best Triton config beside it.
    assert all(w.held and not w.promoted for w in second.winners.values())
    jobs = {b.backend: b.job_id for b in best_rows(database)}
    assert jobs == {BestBackend.TRITON: first.job_id, BestBackend.VENDOR: second.job_id}


def _no_config_compiles(
    landscape: Path, vendor: LandscapeResult, database: Database, tmp_path: Path
) -> JobResult:
    """A 3-trial job on ``landscape``'s problem replayed with every config a compile error and
    torch.matmul ending as ``vendor`` says."""
    land = read_landscape(landscape)
    land.results = [LandscapeResult(r.config, Outcome.COMPILE_ERROR) for r in land.results]
    land.vendor = {"torch.matmul": vendor}
    pool = LocalPool([WorkerPlan("replay", (str(write_landscape(tmp_path / "l.json", land)),))])
    try:
        spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [land.problem], "trials": 3})
        return Driver(database, pool, retime_rounds=2, poll_s=0.0).run(
            submit_job(database, spec, pool)
        )
    finally:
        pool.shutdown()


def test_a_study_with_no_ok_config_is_decided_for_an_ok_vendor_path(
    landscapes: dict[str, list[Path]], database: Database, tmp_path: Path
) -> None:
    ok = LandscapeResult({}, Outcome.OK, 0.5)
    result = _no_config_compiles(landscapes[H200][0], ok, database, tmp_path)
    (winner,) = result.winners.values()
    assert winner.backend is BestBackend.VENDOR and winner.time_ms == 0.5 and winner.promoted
    (row,) = best_rows(database)
    assert (row.backend, row.vendor, row.time_ms, row.triton_ms) == (
        BestBackend.VENDOR,
        "torch.matmul",
        0.5,
        None,
    )


def test_a_study_nothing_decided_says_why_in_the_job_summary(
    landscapes: dict[str, list[Path]], database: Database, tmp_path: Path
) -> None:
    """Every config and the vendor path fail (as every check of a key whose reference runs out
    of memory): the study ends done with no best, and the summary names the failures."""
    wrong = LandscapeResult({}, Outcome.WRONG)
    result = _no_config_compiles(landscapes[H200][0], wrong, database, tmp_path)
    assert best_rows(database) == []
    (study,) = job_summary(database, result.job_id).to_dict()["studies"]
    assert study["status"] == "done" and study["best"] is None
    why = study["undecided"]
    assert why.startswith("4 of 4 measurements failed: config ")  # 3 trials and the vendor path
    assert ": compile_error" in why and "vendor path torch.matmul: wrong" in why
    assert why.count("compile_error") == 1  # one line per distinct failure
    out = io.StringIO()
    render(job_summary(database, result.job_id).to_dict(), Console(file=out, width=400))
    assert "no decision" in out.getvalue() and "vendor path torch.matmul: wrong" in out.getvalue()


def test_undecided_names_distinct_failures_or_that_nothing_ran() -> None:
    assert undecided([]).startswith("nothing was measured")
    errors = [(f"config {n}", TrialOutcome.CRASH, f"boom {n % 5}\ntraceback") for n in range(9)]
    why = undecided([*errors, ("vendor path v", TrialOutcome.OK, None)])
    assert why.startswith("9 of 10 measurements failed: config 0: crash: boom 0; config 1")
    assert why.endswith("(and 2 more)") and "traceback" not in why


def test_a_user_spec_whose_vendor_paths_fail_gets_one_line_each_and_the_study_goes_on(
    database: Database,
) -> None:
    pool = LocalPool([WorkerPlan("interpreter")])
    notes = Notes()
    spec = JobSpec.from_mapping({"kernel": ref("VendorSpec"), "problems": [{"N": 40}], "trials": 2})
    try:
        first = Driver(database, pool, retime_rounds=2, poll_s=0.0, reporter=notes).run(
            submit_job(database, spec, pool)
        )
        again = Driver(database, pool, retime_rounds=2, poll_s=0.0, reporter=Notes()).run(
            submit_job(database, spec, pool)
        )
    finally:
        pool.shutdown()
    failed = [n for n in notes.notes if "failed" in n]
    assert len(failed) == 2 and all(n.count("\n") == 0 for n in failed)
    assert (
        f"kernel {ref('VendorSpec')!r}: vendor path 'raises' failed: compile_error: " in (failed[0])
    )
    assert "vendor path 'wrong_shape' failed: wrong: the output has shape" in failed[1]
    assert all(n.endswith("the study goes on without it") for n in failed)
    assert count(database, Trial, first.job_id) == 1  # the space's one valid config
    assert count(database, VendorTrial, first.job_id) == 4
    # The ok paths are answered from the database; the failed ones are measured again.
    assert count(database, VendorTrial, again.job_id) == 2
    (row,) = best_rows(database, ref("VendorSpec"))
    assert row.vendor_ms and row.backend in (BestBackend.TRITON, BestBackend.VENDOR)


def test_a_matmul_tune_on_the_interpreter_compares_torch_matmul(database: Database) -> None:
    pool = LocalPool([WorkerPlan("interpreter")])
    tiny = {"M": 16, "N": 16, "K": 16, "dtype": "float16"}
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [tiny], "trials": 2})
    try:
        result = Driver(database, pool, retime_rounds=2, poll_s=0.0).run(
            submit_job(database, spec, pool)
        )
    finally:
        pool.shutdown()
    assert count(database, Trial, result.job_id) == 2
    with database.session(readonly=True) as s:
        (vendor,) = repository.vendor_trials_for_study(s, next(iter(result.winners)))
    assert vendor.outcome.value == "ok" and vendor.max_rel_error is not None
    (row,) = best_rows(database)
    assert row.vendor_ms and row.noise is not None and row.triton_ms
    (winner,) = result.winners.values()
    assert winner.retimed and winner.speedup_vs_vendor


def test_a_time_budget_spent_before_any_trial_still_measures_the_vendor_paths(
    vendor_pool: LocalPool, database: Database
) -> None:
    spec = JobSpec.from_mapping(
        {"kernel": "matmul", "problems": [SMALL, BIG], "trials": 6, "minutes": 1e-9}
    )
    result = Driver(database, vendor_pool, retime_rounds=2, poll_s=0.0).run(
        submit_job(database, spec, vendor_pool)
    )
    assert count(database, Trial, result.job_id) == 0  # the budget was spent before any trial
    assert count(database, VendorTrial, result.job_id) == 2
    rows = best_rows(database)
    assert len(rows) == 2  # every key decided, for the vendor path it measured
    assert all((r.backend, r.vendor) == (BestBackend.VENDOR, "torch.matmul") for r in rows)
