"""A Ray "cluster" for the kill scenarios: ``python -m tests.faults._ray_head`` starts a local Ray
the way a driver does (orchestrator.run.dispatch.ensure_ray, so with its watchdog), prints
``address <gcs address>`` and ``pids <pid> ...`` (the processes ``ray.init`` reported), then
answers each line on stdin with ``ok <n>`` once a Ray task has run (the cluster still works);
it exits at EOF."""

from __future__ import annotations

import sys

import ray

from orchestrator.run.dispatch import ensure_ray


@ray.remote(num_cpus=0)
def _square(n: int) -> int:
    return n * n


def main() -> None:
    ensure_ray(None, 2)
    node = ray._private.worker._global_node
    print("address", ray.get_runtime_context().gcs_address, flush=True)
    pids = [p.process.pid for ps in node.all_processes.values() for p in ps]
    print("pids", *pids, flush=True)
    for n, _line in enumerate(sys.stdin):
        print("ok", ray.get(_square.remote(n), timeout=60), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
