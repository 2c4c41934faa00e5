"""What one trial produces: its outcome and, when it ran, its timing samples and error."""

from __future__ import annotations

import enum
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    """How a trial ended. Only ``OK`` competes for best; ``INFRA`` is retried elsewhere."""

    OK = "ok"
    INVALID = "invalid"  # breaks a constraint or runs out of resources: never retried
    WRONG = "wrong"  # ran, but failed the correctness check
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUN_TIMEOUT = "run_timeout"
    CRASH = "crash"  # the trial process died (segfault, os._exit, illegal address)
    INFRA = "infra"  # the worker or node was lost


@dataclass
class Measurement:
    """The result of one trial. Times are milliseconds except the ``*_s`` fields (seconds)."""

    outcome: Outcome
    samples_ms: list[float] = field(default_factory=list)
    compile_s: float | None = None
    run_s: float | None = None
    max_rel_error: float | None = None
    error: str | None = None
    worker: str | None = None
    host: str | None = None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples_ms) if self.samples_ms else None

    @property
    def iqr_ms(self) -> float | None:
        if len(self.samples_ms) < 2:
            return 0.0 if self.samples_ms else None
        q = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return q[2] - q[0]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        out["median_ms"] = self.median_ms
        out["iqr_ms"] = self.iqr_ms
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["outcome"] = Outcome(data["outcome"])
        return cls(**kwargs)
