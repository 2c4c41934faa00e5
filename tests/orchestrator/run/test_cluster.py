"""Jobs on a real multi-node Ray cluster (ray.cluster_utils.Cluster) with replay-backed workers.

Nodes advertise two accelerator types: A hosts replays recorded on an H200 (two nodes), B one
recorded on an A100. One cluster serves the whole module.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import ray
import sqlalchemy as sa
from ray.cluster_utils import Cluster

from db import Database, JobStatus, repository
from db.models import Trial
from orchestrator.app.summary import collect
from orchestrator.errors import JobSpecError, NoWorkersError
from orchestrator.run.dispatch import PoolOptions, WorkerPlan, WorkerPool
from orchestrator.run.driver import Driver, JobResult, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.ledger import OpenJob
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import Vendor, config_key
from tests.orchestrator.conftest import A100, H200
from workers.landscape import read_landscape

SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
BIG = {"M": 1024, "N": 1024, "K": 1024, "dtype": "float16"}
H200_CLASS, A100_CLASS = f"replay:{H200}", f"replay:{A100}"
#: Valid on an H200 (227 KB shared memory), breaks the shared-memory rule on an A100 (163 KB); a
#: whole config, as stored best configs are (one missing a parameter is not in the space).
H200_ONLY = {
    **get_spec("matmul").default_config(Vendor.NVIDIA),
    "BLOCK_M": 128,
    "BLOCK_N": 256,
    "BLOCK_K": 64,
    "GROUP_M": 1,
    "SPLIT_K": 1,
    "num_warps": 8,
    "num_stages": 4,
}


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, list[str]]]:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"accelerator_type:A": 1}},
    )
    a2 = cluster.add_node(num_cpus=1, resources={"accelerator_type:A": 1})
    b = cluster.add_node(num_cpus=1, resources={"accelerator_type:B": 1})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield {"A": [cluster.head_node.node_id, a2.node_id], "B": [b.node_id]}
    ray.shutdown()
    cluster.shutdown()


def make_pool(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], delay_s: float = 0.0
) -> WorkerPool:
    def plan(kind: str, device: str, node: str) -> WorkerPlan:
        return WorkerPlan(
            "replay",
            tuple(str(p) for p in landscapes[device]),
            resources={f"accelerator_type:{kind}": 0.001},
            node_id=node,
        )

    plans = [plan("A", H200, n) for n in nodes["A"]] + [plan("B", A100, nodes["B"][0])]
    return WorkerPool(plans, PoolOptions(replay_delay_s=delay_s))


def spec(**fields: object) -> JobSpec:
    return JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL, BIG], **fields})


def rows(database: Database, job_id: int) -> list[Trial]:
    with database.session(readonly=True) as s:
        found = list(s.scalars(sa.select(Trial).where(Trial.job_id == job_id).order_by(Trial.id)))
        s.expunge_all()  # detached but loaded: readable after the session ends
    return found


def run(database: Database, pool: WorkerPool, job: JobSpec) -> JobResult:
    return Driver(database, pool, retime_rounds=2).run(submit_job(database, job, pool))


def test_routing_best_per_class_and_second_run_reuses(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    pool = make_pool(nodes, landscapes)
    try:
        job = spec(trials=12)
        first = run(database, pool, job)
        assert first.status is JobStatus.DONE
        trials = rows(database, first.job_id)
        with database.session(readonly=True) as s:
            class_of = dict(s.execute(sa.text("select id, key from tf_device_classes")).all())
        by_class = Counter(class_of[t.device_class_id] for t in trials)
        assert by_class == {H200_CLASS: 24, A100_CLASS: 24}
        for t in trials:
            node = (t.worker or "").split("/")[0]
            assert node in nodes["A" if class_of[t.device_class_id] == H200_CLASS else "B"]
        used_a = {
            (t.worker or "").split("/")[0]
            for t in trials
            if class_of[t.device_class_id] == H200_CLASS
        }
        assert used_a == set(nodes["A"])  # both A nodes took trials
        with database.session(readonly=True) as s:
            best = repository.get_best(
                s, "matmul", kernel_version=get_spec("matmul").version_hash()
            )
        assert sorted((b.device_class_key, b.problem_key) for b in best) == sorted(
            (c, problem_key(p)) for c in (H200_CLASS, A100_CLASS) for p in (SMALL, BIG)
        )
        summary = collect(database, first.job_id)
        assert summary["job"] == first.job_id and summary["status"] == "done"
        for st in summary["studies"]:
            assert set(st) >= {"problem", "device_class", "best", "trials", "measured", "reused"}
            assert st["measured"] == 12 and st["reused"] == 0
            assert set(st["best"]) >= {"config", "time_ms"}

        calls_before = sum(len(v) for v in pool.call_logs().values())
        second = run(database, pool, job)
        assert second.status is JobStatus.DONE
        assert sum(len(v) for v in pool.call_logs().values()) == calls_before
        for st in collect(database, second.job_id)["studies"]:
            assert st["measured"] == 0 and st["reused"] == 12
    finally:
        pool.shutdown()


def test_retime_answers_each_job_with_its_own_configs(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]]
) -> None:
    """Jobs of two classes, spread over class A's two workers and taken in turn by each: every
    job gets one median per round for each of its configs, the replayed time of that config."""
    recorded = {
        (device, land.problem_key, key): r.time_ms
        for device, paths in landscapes.items()
        for land in map(read_landscape, paths)
        for key, r in land.by_config().items()
        if r.time_ms is not None
    }

    def fastest(device: str, problem: dict[str, object], n: int) -> list[dict[str, object]]:
        (land,) = [x for x in map(read_landscape, landscapes[device]) if x.problem == problem]
        ok = sorted((r for r in land.results if r.time_ms is not None), key=lambda r: r.time_ms)
        return [dict(r.config) for r in ok[:n]]

    jobs = [
        (H200_CLASS, "matmul", SMALL, fastest(H200, SMALL, 1)),
        (H200_CLASS, "matmul", BIG, fastest(H200, BIG, 3)),
        (A100_CLASS, "matmul", SMALL, fastest(A100, SMALL, 2)),
        (H200_CLASS, "matmul", SMALL, fastest(H200, SMALL, 2)[1:]),
        (A100_CLASS, "matmul", BIG, []),
    ]
    pool = make_pool(nodes, landscapes)
    try:
        answers = pool.retime(jobs, rounds=2)
    finally:
        pool.shutdown()
    assert answers[-1] is None  # no configs: nothing to re-time
    for (class_key, _, problem, configs), medians in zip(jobs[:-1], answers[:-1], strict=True):
        device = class_key.removeprefix("replay:")
        expected = [[recorded[(device, problem_key(problem), config_key(c))]] * 2 for c in configs]
        assert medians == expected


def test_constraint_breaking_config_never_reaches_a_worker(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    version = get_spec("matmul").version_hash()
    with database.session() as s:  # an H200 best: warm start enqueues it for the A100 study
        repository.upsert_best(
            s,
            "matmul",
            version,
            problem_key(SMALL),
            repository.ensure_device_class(s, H200_CLASS, "nvidia", H200, "sm_90", True),
            "3.9",
            H200_ONLY,
            0.001,
            None,
            None,
            None,
        )
    pool = make_pool(nodes, landscapes)
    try:
        job = JobSpec.from_mapping(
            {"kernel": "matmul", "problems": [SMALL], "device_classes": [A100_CLASS], "trials": 6}
        )
        driver = Driver(database, pool, retime_rounds=1)
        result = driver.run(submit_job(database, job, pool))
        assert result.status is JobStatus.DONE
        (running,) = driver._studies
        search = running.study.search
        pruned = [
            search.encoding.decode(t.params)
            for t in search.study.get_trials()
            if t.user_attrs.get("reason", "").startswith("shared-memory")
        ]
        assert H200_ONLY in pruned  # the enqueued config was asked and answered by the driver
        bad = config_key(H200_ONLY)
        assert all(bad not in call for log in pool.call_logs().values() for call in log)
        assert all(t.config_key != bad for t in rows(database, result.job_id))
        assert len(rows(database, result.job_id)) == 6
    finally:
        pool.shutdown()


def _in_thread(
    database: Database, pool: WorkerPool, job: JobSpec
) -> tuple[int, threading.Thread, list[JobResult]]:
    job_id = submit_job(database, job, pool)
    out: list[JobResult] = []
    thread = threading.Thread(
        target=lambda: out.append(Driver(database, pool, retime_rounds=1).run(job_id))
    )
    thread.start()
    return job_id, thread, out


def _wait_rows(database: Database, job_id: int, n: int, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while len(rows(database, job_id)) < n:
        assert time.monotonic() < end, "driver made no progress"
        time.sleep(0.05)


def test_killed_worker_loses_nothing_and_job_completes(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    pool = make_pool(nodes, landscapes, delay_s=0.05)
    try:
        job = JobSpec.from_mapping(
            {"kernel": "matmul", "problems": [SMALL], "device_classes": [H200_CLASS], "trials": 30}
        )
        job_id, thread, out = _in_thread(database, pool, job)
        _wait_rows(database, job_id, 6)
        victim = pool.workers(H200_CLASS)[0].worker
        finished_before = [
            t.id for t in rows(database, job_id) if t.worker == victim and t.outcome.value == "ok"
        ]
        ray.kill(pool.actor(victim))
        thread.join(120)
        assert out and out[0].status is JobStatus.DONE
        trials = rows(database, job_id)
        assert set(finished_before) <= {t.id for t in trials}
        infra = [t for t in trials if t.outcome.value == "infra"]
        assert infra and all(t.worker == victim for t in infra)
        ok_keys = Counter(t.config_key for t in trials if t.outcome.value == "ok")
        assert max(ok_keys.values()) == 1  # no duplicate ok for a retried config
        assert all(ok_keys[t.config_key] == 1 or t.config_key not in ok_keys for t in infra)
        assert sum(t.outcome.value != "infra" for t in trials) == 30
        assert victim not in {w.worker for w in pool.workers()}
    finally:
        pool.shutdown()


def test_cancel_through_the_database_flag(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    pool = make_pool(nodes, landscapes, delay_s=0.05)
    try:
        job_id, thread, out = _in_thread(database, pool, spec(trials=500))
        _wait_rows(database, job_id, 5)
        with database.session() as s:
            repository.request_cancel(s, job_id)
        thread.join(60)
        assert out and out[0].status is JobStatus.CANCELLED
        kept = rows(database, job_id)
        assert 5 <= len(kept) < 4 * 500
        with database.session(readonly=True) as s:
            assert repository.get_job(s, job_id).status is JobStatus.CANCELLED
            statuses = {
                v
                for (v,) in s.execute(
                    sa.text(f"select status from tf_studies where job_id={job_id}")
                )
            }
        assert statuses == {"cancelled"}
    finally:
        pool.shutdown()


def test_missing_class_or_graph_without_gpu_fails_before_writing(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    pool = make_pool(nodes, landscapes)
    try:
        with pytest.raises(NoWorkersError) as info:
            submit_job(database, spec(device_classes=["H100"]), pool)
        assert A100_CLASS in str(info.value) and H200_CLASS in str(info.value)
        with pytest.raises(JobSpecError, match="is replay, not a GPU"):
            submit_job(database, spec(objective="graph"), pool)
        with database.session(readonly=True) as s:
            assert repository.list_jobs(s) == []
    finally:
        pool.shutdown()


class _StuckSampler(optuna.samplers.BaseSampler):
    """Proposes one fixed config forever, as TPE and GP do on sparse spaces (issue 4 notes)."""

    def __init__(self, params: dict[str, object]) -> None:
        self._params = params

    def infer_relative_search_space(self, study: object, trial: object) -> dict[str, object]:
        return {}

    def sample_relative(self, study: object, trial: object, space: object) -> dict[str, object]:
        return {}

    def sample_independent(self, study: object, trial: object, name: str, dist: object) -> object:
        return self._params[name]


class _StuckDriver(Driver):
    def _setup(self, job_id: int) -> OpenJob:
        out = super()._setup(job_id)
        default = out.kernel.default_config(Vendor.NVIDIA)
        for r in self._studies:
            search = r.study.search
            search.study.sampler = _StuckSampler(dict(search.encoding.encode(default) or {}))
        return out


def test_a_stuck_sampler_still_spends_the_budget(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    pool = make_pool(nodes, landscapes)
    try:
        job = JobSpec.from_mapping(
            {"kernel": "matmul", "problems": [SMALL], "trials": 15, "device_classes": [H200_CLASS]}
        )
        result = _StuckDriver(database, pool, retime_rounds=1).run(submit_job(database, job, pool))
        trials = rows(database, result.job_id)
        assert result.status is JobStatus.DONE
        assert len(trials) == 15 and len({t.config_key for t in trials}) == 15
    finally:
        pool.shutdown()


def test_kept_workers_of_equal_plans_are_distinct_actors(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]]
) -> None:
    """Equal plans (one per GPU of a node) must not share one kept actor: a second job finds
    every one of them again, and stopping ends them all."""
    from orchestrator.run.dispatch import stop_kept_workers

    node = nodes["A"][0]
    plan = WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]), node_id=node)
    options = PoolOptions(keep=True)
    first = WorkerPool([plan, plan], options)
    pids = {w.pid for w in first.workers()}
    first.shutdown()
    again = WorkerPool([plan, plan], options)
    try:
        assert len(pids) == 2 and {w.pid for w in again.workers()} == pids
    finally:
        again.shutdown()
        assert stop_kept_workers() == 2


def test_warm_start_seeds_the_nearest_problems_fastest_configs(
    nodes: dict[str, list[str]], landscapes: dict[str, list[Path]], database: Database
) -> None:
    from orchestrator.run.warm_start import WARM_NEAREST_TOP

    pool = make_pool(nodes, landscapes)
    try:
        first = run(database, pool, spec(problems=[SMALL], device_classes=[H200_CLASS], trials=12))
        small = sorted(
            (t for t in rows(database, first.job_id) if t.median_ms is not None),
            key=lambda t: t.median_ms or 0.0,
        )
        top = {config_key(t.config) for t in small[:WARM_NEAREST_TOP]}
        second = run(database, pool, spec(problems=[BIG], device_classes=[H200_CLASS], trials=12))
        # Enqueued first (after the default and the nearest's best), so within the 12-trial
        # budget; rows are stored as results arrive from two workers, so not necessarily first.
        measured = {config_key(t.config) for t in rows(database, second.job_id)}
        assert top <= measured
    finally:
        pool.shutdown()
