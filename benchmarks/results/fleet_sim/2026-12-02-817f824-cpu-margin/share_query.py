"""CPU of the shared pool's free-slot query (orchestrator/server/shared_pool.py): 48 jobs of 4
teams on 6 classes of one pool, a query then a submit by one job, and a query with no slot free.

    PYTHONPATH=$PWD python3 benchmarks/results/fleet_sim/2026-12-02-817f824-cpu-margin/share_query.py

from the root of the tree measured (here: fba4ac2 against dc23aad, alternating).
"""

from __future__ import annotations

import timeit

from orchestrator.server.shared_pool import SharedPool
from workers.trial import TrialRequest


class _Pool:
    """Slots without end; a submit takes one."""

    def __init__(self) -> None:
        self.free = 10**9

    def free_slots(self, class_key: str) -> int:
        return self.free

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> None:
        self.free -= 1


def main() -> int:
    pool = _Pool()
    shared = SharedPool(pool)  # type: ignore[arg-type]
    views = [shared.view(j, f"team{j % 4}") for j in range(48)]
    request = TrialRequest("k", {}, {})
    for j, v in enumerate(views):
        v.free_slots(f"c{j % 6}")
        v.submit(f"c{j % 6}", request, None)
    view = views[0]

    def ask_and_submit() -> None:
        view.free_slots("c0")
        view.submit("c0", request, None)

    n = 20000
    pair = min(timeit.repeat(ask_and_submit, number=n, repeat=3)) / n
    pool.free = 0
    full = min(timeit.repeat(lambda: view.free_slots("c0"), number=n, repeat=3)) / n
    print(f"query and submit {pair * 1e6:.2f} us; query with no slot free {full * 1e6:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
