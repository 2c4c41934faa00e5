"""The worker body: one device's runner answering trials, run as a Ray actor or in-process.

:class:`TrialWorker` holds a :class:`workers.runner.TrialRunner` (or, for a replay, a
:class:`workers.replay.ReplayRunner`) and measures one trial at a time. The Ray pool
(:mod:`orchestrator.run.dispatch`) starts it as an actor on a node of its class; the local pool
(:mod:`orchestrator.run.local_pool`) holds it in the driver's process.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.run.jobs import SourceKind
from orchestrator.run.pool import Candidate, WorkerInfo, retime_request
from search_spaces.problem import problem_key
from search_spaces.space import config_key
from workers.device import Fingerprint
from workers.measurement import Measurement, Outcome
from workers.trial import TrialRequest

#: Trials a worker remembers for ``call_log`` (a kept worker lives across many jobs).
CALL_LOG_LENGTH = 100_000


@dataclass(frozen=True)
class WorkerPlan:
    """How to start one worker actor: its backend and what it asks of the cluster."""

    backend: str  # "auto", "cuda" or "rocm" (this node's GPU), "interpreter" or "replay"
    replay_paths: tuple[str, ...] = ()
    num_gpus: float = 0.0
    num_cpus: float = 0.0
    resources: Mapping[str, float] = field(default_factory=dict)
    node_id: str | None = None
    compile_workers: int = 0


#: Calls queued per actor without a compile pool (replay, interpreter): one runs, one waits.
DEFAULT_IN_FLIGHT = 2


@dataclass(frozen=True)
class PoolOptions:
    """Pool settings: calls queued per actor (None: see ``slots``), crashes in a row before
    retirement, runner knobs (``compile_timeout_s``/``run_timeout_s`` bound each trial's phases,
    from the job spec); ``keep``: leave the actors running for the next job (see the module
    docstring of orchestrator.run.dispatch)."""

    in_flight: int | None = None
    max_crashes: int = 3
    interpreter_workers: int = 1
    graph: bool = False
    replay_noise: float = 0.0
    replay_seed: int = 0
    replay_delay_s: float = 0.0
    start_timeout_s: float = 300.0
    keep: bool = False
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    owner: str | None = None  # kept workers' owner (None: this user); see dispatch.kept_name

    def slots(self, plan: WorkerPlan) -> int:
        """Calls queued on one actor: ``in_flight`` if set, else one per compile process plus
        the one on the device (so the pool never waits for the driver), else DEFAULT_IN_FLIGHT."""
        if self.in_flight is not None:
            return self.in_flight
        return plan.compile_workers + 1 if plan.compile_workers else DEFAULT_IN_FLIGHT


class TrialWorker:
    """Holds a TrialRunner (or a ReplayRunner) and answers trials one at a time."""

    def __init__(self, plan: WorkerPlan, options: PoolOptions, node_id: str | None = None) -> None:
        """``node_id``: where it runs (default: the Ray node of the actor it runs in)."""
        self._plan = plan
        self._options = options
        self._runner = self._new_runner()
        self._log: deque[str] = deque(maxlen=CALL_LOG_LENGTH)
        if node_id is None:
            import ray

            node_id = ray.get_runtime_context().get_node_id()
        fp: Fingerprint = self._runner.fingerprint
        keys = None
        if plan.backend == SourceKind.REPLAY.value:
            keys = tuple(self._runner.keys())
        self._info = WorkerInfo(
            worker=f"{node_id}/{os.getpid()}",
            node_id=node_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            fingerprint=fp,
            limits=self._runner.limits,
            replay_keys=keys,
        )

    def _new_runner(self, compile_ahead: bool = True) -> Any:
        """A runner for this actor's device; ``compile_ahead`` False: without a compile pool, for
        re-timing (a replay runner then draws its noise from its own stream)."""
        if self._plan.backend == SourceKind.REPLAY.value:
            from workers.replay import ReplayOptions, ReplayRunner

            return ReplayRunner(
                self._plan.replay_paths,
                ReplayOptions(
                    noise=self._options.replay_noise,
                    seed=self._options.replay_seed,
                    delay_s=self._options.replay_delay_s,
                    stream="" if compile_ahead else "retime",
                ),
            )
        from workers.device import detect
        from workers.runner import RunnerOptions, TrialRunner

        fp = detect(self._plan.backend)[0]
        gpu = fp.backend.value != "interpreter"
        options = RunnerOptions.for_backend(
            fp.backend,
            graph=self._options.graph and gpu,
            compile_workers=self._plan.compile_workers if gpu and compile_ahead else 0,
            compile_timeout_s=self._options.compile_timeout_s,
            run_timeout_s=self._options.run_timeout_s,
        )
        runner = TrialRunner(options, fingerprint=fp)
        runner.start()
        return runner

    def info(self) -> WorkerInfo:
        return self._info

    def run(self, request: TrialRequest) -> Measurement:
        """Measure one trial (a config, or a vendor path: not in ``call_log``); the result names
        this worker."""
        if request.vendor is None:
            self._log.append(
                f"{request.kernel}|{problem_key(request.problem)}|{config_key(request.config)}"
            )
        m: Measurement = self._runner.run(request)
        m.worker, m.host = self._info.worker, self._info.host
        return m

    def retime(
        self, jobs: Sequence[tuple[str, dict[str, Any], list[Candidate]]], rounds: int
    ) -> list[list[list[float]]]:
        """Time each (kernel, problem, candidates) job again in one fresh runner, one job after
        another, a job's candidates (configs and vendor paths) interleaved (A B C A B C ...). The runner has no compile pool, as
        the trials that chose the configs compiled them into this node's cache.

        One call per actor: its GPU measures one config at a time (concurrent calls would time
        in several processes at once and slow each other down).
        Returns, per job, each candidate's medians, one per round that ended ``ok``.
        """
        runner = self._new_runner(compile_ahead=False)
        out: list[list[list[float]]] = []
        try:
            for kernel, problem, candidates in jobs:
                medians: list[list[float]] = [[] for _ in candidates]
                for _ in range(rounds):
                    for i, candidate in enumerate(candidates):
                        m = runner.run(retime_request(kernel, problem, candidate))
                        if m.outcome is Outcome.OK and m.median_ms is not None:
                            medians[i].append(m.median_ms)
                out.append(medians)
        finally:
            runner.close()
        return out

    def call_log(self) -> list[str]:
        """``kernel|problem key|config key`` of the config trials this actor was asked to run
        (the last CALL_LOG_LENGTH)."""
        return list(self._log)

    def close(self) -> None:
        self._runner.close()
