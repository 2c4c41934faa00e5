"""The Ray pool: one worker actor per device, routing by device class, lost and crashing workers.

:class:`WorkerPool` implements :class:`orchestrator.run.pool.Pool`; the actor body is
:class:`orchestrator.run.worker.TrialWorker`.

Placement: a GPU actor asks for ``num_gpus=1`` plus a sliver of its node's
``accelerator_type:<X>`` resource and is pinned to that node, so a class's trials only land on GPUs
of that class. Interpreter actors take one CPU each and form the class ``cpu``; replay actors take
no CPU and form ``replay:<recorded device>``. Each actor runs one trial at a time (Ray queues the
calls); the pool keeps up to ``in_flight`` calls queued per actor so its device never idles while
the driver thinks.

Kept workers (``PoolOptions.keep``, on a running Ray cluster): actors are named, detached and
found again by the next job of the same owner (the user, by default) with the same plan and
options, so their trial processes, compile pools and CUDA contexts stay warm between jobs;
``stop_kept_workers`` ends one owner's, never another's.

A local Ray started here (:func:`ensure_ray`) binds to 127.0.0.1 with no dashboard, leaves
Ray's token authentication as configured, and is guarded by a watchdog process
(orchestrator.run.ray_watchdog) that ends it within seconds if this process is killed; a Ray
found at an address is never guarded (nor ended); a ``--ray-address`` that does not answer fails within
``CONNECT_TIMEOUT_S``, and Ray start or connect failures are one-line ``OrchestratorError``s.

Faults: a call that fails with a RayActorError means the actor (or its node) is gone: every trial
in flight on it comes back as ``lost`` (the driver records ``infra`` and re-dispatches it once
more on another actor of the class), and a fresh actor of its plan replaces it
(orchestrator.run.healing: capped, with backoff; a class left without live workers waits in ``wait``
for its replacement, and :meth:`WorkerPool.health` reports it meanwhile). An actor whose trials crash ``max_crashes`` times in a row is
retired: it gets no new trials, is killed once its queue drains, and a fresh actor of the same
plan takes its place at once (a one-worker job goes on).
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.errors import NoWorkersError, OrchestratorError, WorkerFailure
from orchestrator.run import ray_watchdog
from orchestrator.run.healing import Healer
from orchestrator.run.jobs import DeviceSource, SourceKind
from orchestrator.run.pool import Done, RetimeJob, WorkerInfo
from orchestrator.run.worker import PoolOptions, TrialWorker, WorkerPlan
from workers.measurement import Measurement, Outcome
from workers.trial import TrialRequest

__all__ = [
    "PoolOptions",
    "WorkerPlan",
    "WorkerPool",
    "compile_workers_for",
    "ensure_ray",
    "kept_name",
    "plans_for",
    "stop_kept_workers",
]

ACCELERATOR_PREFIX = "accelerator_type:"
#: Ray namespace of kept (named, detached) worker actors.
KEPT_NAMESPACE = "tunefleet"
#: Share of a node's accelerator_type resource one actor asks for (Ray gives each node 1.0).
ACCELERATOR_SHARE = 0.001


#: Seconds a ``--ray-address`` has to answer before the job fails.
CONNECT_TIMEOUT_S = 10.0


@dataclass
class _Handle:
    actor: Any
    info: WorkerInfo
    slots: int
    plan: WorkerPlan
    in_flight: dict[Any, tuple[TrialRequest, object]] = field(default_factory=dict)
    crashes: int = 0
    retired: bool = False
    dead: bool = False


def ensure_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Connect to ``address`` (or RAY_ADDRESS), else start a small local Ray of our own bound to
    127.0.0.1, even when another Ray runs on this machine; True if we started it. Raises
    OrchestratorError (one line) when Ray cannot start or ``address`` does not answer."""
    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS")
    try:
        if target:
            _probe(target)
            ray.init(address=target, logging_level=logging.WARNING, log_to_driver=False)
            return False
        with _loopback_only():
            ray.init(
                address="local",  # without it Ray joins any cluster it finds on this machine
                num_cpus=num_cpus or os.cpu_count() or 2,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
    except OrchestratorError:
        raise
    except Exception as exc:  # Ray raises many types (ConnectionError, RuntimeError, ...)
        lines = [line for line in str(exc).splitlines() if line.strip()] or [repr(exc)]
        what = f"connect to Ray at {target}" if target else "start a local Ray"
        raise OrchestratorError(f"could not {what}: {lines[-1].strip()}") from None
    _guard_local_ray()
    return True


def _guard_local_ray() -> None:
    """Start the watchdog (orchestrator.run.ray_watchdog) that ends the local Ray just started
    here if this process dies without shutting it down; logged, not raised, if it cannot."""
    node = ray._private.worker._global_node
    processes: dict[str, list[Any]] = getattr(node, "all_processes", {}) if node else {}
    raylets = [p.process.pid for p in processes.get("raylet", [])]
    others = [p.process.pid for k, ps in processes.items() if k != "raylet" for p in ps]
    if len(raylets) != 1 or not ray_watchdog.start(os.getpid(), raylets[0], others):
        logging.getLogger(__name__).warning("no watchdog for the local Ray: a kill -9 may leave it")


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """While Ray starts: its single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read by
    the processes it spawns, and the constant this process already read), in which 127.0.0.1 is
    kept as the node address instead of being swapped for a reachable one; so the GCS, raylet,
    agents and workers listen on loopback only."""
    from ray._private import ray_constants

    saved_env = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)
    saved = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            os.environ.pop(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, None)
        else:
            os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = saved_env


def _probe(address: str) -> None:
    """Fail fast when a ``host:port`` (or ``ray://host:port``) Ray address does not accept a
    TCP connection within CONNECT_TIMEOUT_S; other forms (``auto``) are left to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise OrchestratorError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); check --ray-address"
        ) from None


#: Most compile processes one GPU worker starts.
MAX_COMPILE_WORKERS = 16


def compile_workers_for(cpus: int, gpus: int) -> int:
    """Compile processes per GPU worker: the node's cores shared by its GPUs, one kept free."""
    return max(1, min(MAX_COMPILE_WORKERS, cpus // max(1, gpus) - 1))


def plans_for(sources: Sequence[DeviceSource], options: PoolOptions) -> list[WorkerPlan]:
    """Actor plans for ``--device`` sources: ``auto`` = one per GPU in the cluster (else the
    interpreter), ``cuda``/``rocm`` = one per GPU (NoWorkersError if the cluster has none),
    ``interpreter`` = ``interpreter_workers`` CPU actors, ``replay`` = one actor."""
    plans: list[WorkerPlan] = []
    interpreter = WorkerPlan("interpreter", num_cpus=1.0)
    for source in sources:
        if source.kind is SourceKind.REPLAY:
            plans.append(WorkerPlan("replay", replay_paths=source.paths))
        elif source.kind is SourceKind.INTERPRETER:
            plans.extend([interpreter] * options.interpreter_workers)
        else:
            gpu_plans = []
            for node in ray.nodes():
                if not node.get("Alive"):
                    continue
                resources = node.get("Resources", {})
                accel = sorted(k for k in resources if k.startswith(ACCELERATOR_PREFIX))
                gpus = int(resources.get("GPU", 0))
                for _ in range(gpus):
                    gpu_plans.append(
                        WorkerPlan(
                            source.kind.value,
                            num_gpus=1.0,
                            resources={accel[0]: ACCELERATOR_SHARE} if accel else {},
                            node_id=node["NodeID"],
                            compile_workers=compile_workers_for(int(resources.get("CPU", 1)), gpus),
                        )
                    )
            if not gpu_plans and source.kind is not SourceKind.AUTO:
                raise NoWorkersError(
                    f"--device {source.kind.value}: the Ray cluster has no GPU; use --device "
                    "interpreter, or auto (the interpreter where there is no GPU)"
                )
            plans.extend(gpu_plans or [interpreter] * options.interpreter_workers)
    return plans


class WorkerPool:
    """Worker actors grouped by device class; submit, wait, retire, retime (a
    :class:`orchestrator.run.pool.Pool`)."""

    def __init__(self, plans: Sequence[WorkerPlan], options: PoolOptions | None = None) -> None:
        """Start one actor per plan and wait until each reports its device class."""
        if not plans:
            raise NoWorkersError(
                "no workers to start; give --device auto, interpreter or replay:FILE"
            )
        self.options = options or PoolOptions()
        actors: list[Any] = []
        copies: Counter[str] = Counter()
        for plan in plans:
            name = None
            if self.options.keep:
                copies[repr(plan)] += 1
                name = kept_name(plan, self.options, copies[repr(plan)] - 1)
            actors.append(self._actor(plan, name))
        try:
            infos = ray.get([a.info.remote() for a in actors], timeout=self.options.start_timeout_s)
        except GetTimeoutError:
            for a in actors:
                ray.kill(a)
            raise NoWorkersError(
                f"workers did not start within {self.options.start_timeout_s:.0f} s; "
                "check that the cluster has the resources they ask for"
            ) from None
        except (RayActorError, RayTaskError) as exc:
            for a in actors:
                ray.kill(a)
            cause = exc.cause if isinstance(exc, RayTaskError) else exc
            raise OrchestratorError(
                f"a worker failed to start: {str(cause).splitlines()[-1]}"
            ) from None
        self._handles = [
            _Handle(a, i, self.options.slots(plan), plan)
            for a, i, plan in zip(actors, infos, plans, strict=True)
        ]
        self._by_ref: dict[Any, _Handle] = {}
        self._known = {i.class_key for i in infos}
        self._healer = Healer(lambda plan: self._actor(plan, None), self.options.start_timeout_s)

    def _actor(self, plan: WorkerPlan, name: str | None) -> Any:
        """Start (or, named, find) the actor of ``plan``; a named one is a detached kept worker."""
        opts: dict[str, Any] = {
            "num_cpus": plan.num_cpus,
            "num_gpus": plan.num_gpus,
            "resources": dict(plan.resources),
            "max_restarts": 0,
            # GPU runners are thread-safe: calls in flight compile ahead in the compile pool.
            "max_concurrency": self.options.slots(plan) if plan.compile_workers else 1,
        }
        if plan.node_id is not None:
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(plan.node_id, soft=False)
        if name is not None:
            opts.update(
                name=name, namespace=KEPT_NAMESPACE, lifetime="detached", get_if_exists=True
            )
        return ray.remote(TrialWorker).options(**opts).remote(plan, self.options)

    def _replace(self, old: _Handle) -> None:
        """Start a fresh actor for a retired worker's plan (job-scoped, even in a kept pool: the
        kept name is still the retired actor's); if it does not start, the class has one less."""
        actor = self._actor(old.plan, None)
        try:
            info = ray.get(actor.info.remote(), timeout=self.options.start_timeout_s)
        except (GetTimeoutError, RayActorError, RayTaskError):
            with contextlib.suppress(Exception):  # never started: nothing to release
                ray.kill(actor)
            return
        self._handles.append(_Handle(actor, info, old.slots, old.plan))

    # ----- what the pool has
    def heal(self, wait: bool = False) -> None:
        """Take on the lost workers' replacements that have started (``wait``: for a class left
        with no live worker, wait until its replacement starts or times out)."""
        live = {h.info.class_key for h in self._handles if not h.dead and not h.retired}
        for new in self._healer.poll(self._known - live if wait else ()):
            self._handles.append(_Handle(new.actor, new.info, new.slots, new.plan))

    def health(self) -> list[str]:
        """Why a device class of the pool cannot measure now, one line each ([]: every class
        has a live worker)."""
        live = {h.info.class_key for h in list(self._handles) if not h.dead and not h.retired}
        return [
            f"device class {k} has no live worker ({self._healer.state(k)})"
            for k in sorted(self._known - live)
        ]

    def classes(self) -> dict[str, WorkerInfo]:
        """Device class key -> one live worker of it (its limits and fingerprint stand for all)."""
        out: dict[str, WorkerInfo] = {}
        for h in self._handles:
            if not h.dead and not h.retired:
                out.setdefault(h.info.class_key, h.info)
        return out

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        """Live, non-retired workers (of one class, if given)."""
        return [
            h.info
            for h in self._handles
            if not h.dead and not h.retired and class_key in (None, h.info.class_key)
        ]

    def actor(self, worker: str) -> Any:
        """The Ray actor handle of ``worker`` (tests use it to kill or inspect a worker)."""
        for h in self._handles:
            if h.info.worker == worker:
                return h.actor
        raise KeyError(worker)

    def free_slots(self, class_key: str) -> int:
        return sum(
            max(0, h.slots - len(h.in_flight))
            for h in self._handles
            if h.info.class_key == class_key and not h.dead and not h.retired
        )

    @property
    def in_flight(self) -> int:
        return len(self._by_ref)

    # ----- dispatch
    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        """Queue ``request`` on the least-busy live worker of ``class_key``."""
        live = [
            h
            for h in self._handles
            if h.info.class_key == class_key and not h.dead and not h.retired
        ]
        if not live:
            raise NoWorkersError(f"no live worker of class {class_key!r} is left")
        h = min(live, key=lambda x: len(x.in_flight))
        ref = h.actor.run.remote(request)
        h.in_flight[ref] = (request, tag)
        self._by_ref[ref] = h
        return h.info

    def _lose(self, h: _Handle, why: str) -> list[Done]:
        h.dead = True
        out = []
        for ref, (request, tag) in h.in_flight.items():
            self._by_ref.pop(ref, None)
            m = Measurement(Outcome.INFRA, error=f"worker lost: {why}"[:500])
            m.worker, m.host = h.info.worker, h.info.host
            out.append(Done(request, tag, m, h.info, lost=True))
        h.in_flight.clear()
        with contextlib.suppress(Exception):  # already gone: nothing left to release
            ray.kill(h.actor)
        self._healer.lost(h.plan, h.slots, h.info.class_key)
        return out

    def wait(self, timeout: float) -> list[Done]:
        """Results that are ready within ``timeout`` seconds (maybe none); then :meth:`heal`."""
        out = self._collect(timeout)
        self.heal(wait=True)
        return out

    def _collect(self, timeout: float) -> list[Done]:
        refs = list(self._by_ref)
        if not refs:
            time.sleep(min(timeout, 0.05))
            return []
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        out: list[Done] = []
        for ref in ready:
            h = self._by_ref.get(ref)
            if h is None:  # its worker was lost while handling an earlier ref
                continue
            try:
                m: Measurement = ray.get(ref)
            except RayActorError as exc:
                out.extend(self._lose(h, str(exc).splitlines()[0]))
                continue
            except RayTaskError as exc:
                raise WorkerFailure(
                    f"worker {h.info.worker} raised: {str(exc.cause).splitlines()[-1]}"
                ) from None
            request, tag = h.in_flight.pop(ref)
            del self._by_ref[ref]
            h.crashes = h.crashes + 1 if m.outcome is Outcome.CRASH else 0
            if h.crashes >= self.options.max_crashes and not h.retired:
                h.retired = True
                self._replace(h)
            if h.retired and not h.in_flight:
                ray.kill(h.actor)
                h.dead = True
            out.append(Done(request, tag, m, h.info))
        return out

    def retime(
        self,
        jobs: Sequence[RetimeJob],
        rounds: int,
        timeout_s: float = 600.0,
    ) -> list[list[list[float]] | None]:
        """Re-time each (class, kernel, problem, configs) on a worker of the class; per job the
        medians per config, or None when its worker was lost or took longer than ``timeout_s``
        per job. Jobs are spread over a class's workers, which all run at once; each worker
        takes its share in one call, one job after another."""
        shares: dict[str, list[int]] = {}
        counter: dict[str, int] = {}
        for j, (class_key, _kernel, _problem, configs) in enumerate(jobs):
            live = self.workers(class_key)
            if not live or not configs:
                continue
            n = counter.get(class_key, 0)
            counter[class_key] = n + 1
            shares.setdefault(live[n % len(live)].worker, []).append(j)
        refs = {
            worker: self.actor(worker).retime.remote([jobs[j][1:] for j in share], rounds)
            for worker, share in shares.items()
        }
        out: list[list[list[float]] | None] = [None] * len(jobs)
        for worker, ref in refs.items():
            try:
                medians = ray.get(ref, timeout=timeout_s * len(shares[worker]))
            except (RayActorError, GetTimeoutError):
                continue
            for j, job_medians in zip(shares[worker], medians, strict=True):
                out[j] = job_medians
        return out

    def call_logs(self) -> dict[str, list[str]]:
        """Worker -> the trials it was asked to run (live workers only)."""
        live = [h for h in self._handles if not h.dead]
        logs = ray.get([h.actor.call_log.remote() for h in live])
        return {h.info.worker: log for h, log in zip(live, logs, strict=True)}

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Close every runner (ending its child process, waiting up to ``grace_s``; none at
        0), then stop the actors; kept workers are left running."""
        self._healer.close()
        if self.options.keep:
            for h in self._handles:
                h.dead = True
            self._by_ref.clear()
            return
        live = [h for h in self._handles if not h.dead]
        if live and grace_s > 0:
            ray.wait([h.actor.close.remote() for h in live], num_returns=len(live), timeout=grace_s)
        for h in self._handles:
            if not h.dead:
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(h.actor)
                h.dead = True
        self._by_ref.clear()


def kept_name(plan: WorkerPlan, options: PoolOptions, copy: int = 0) -> str:
    """The Ray name of the kept actor of ``options.owner`` (default: this user) for the
    ``copy``-th of a job's equal ``plan``s (one per GPU of a node) under ``options``: another
    owner, plan or options (noise, graph timing, slots, timeouts, ...) gets its own actor."""
    digest = hashlib.sha1(repr((plan, replace(options, keep=False, owner=None))).encode())
    return f"{_owner_prefix(options.owner)}{plan.backend}-{digest.hexdigest()[:16]}-{copy}"


def _owner_prefix(owner: str | None) -> str:
    who = owner or getpass.getuser()
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in who)
    return f"worker-{safe}-"


def stop_kept_workers(grace_s: float = 10.0, owner: str | None = None) -> int:
    """Close and kill ``owner``'s (default: this user's) kept worker actors on the connected
    cluster, never another owner's; how many there were."""
    prefix = _owner_prefix(owner)
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == KEPT_NAMESPACE and str(a.get("name", "")).startswith(prefix)
    ]
    actors = [ray.get_actor(name, namespace=KEPT_NAMESPACE) for name in names]
    if actors:
        ray.wait([a.close.remote() for a in actors], num_returns=len(actors), timeout=grace_s)
    for actor in actors:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor)
    return len(actors)
