"""One progress bar for the whole conversion, with an ETA.

The job is a plan of stages: per stage, the weight of one run (its expected seconds on SmolLM2)
and how many runs are expected. `stage(key, label, items)` starts one run of stage `key` (shown
as `label` on the bar) and returns a `tick(n=1)` that moves the bar by n items' share of the
run's weight; a stage that runs more often than planned (another search candidate) grows the
bar's total, so the ETA stays honest. Disabled, every call is a no-op.
"""
from __future__ import annotations

from collections.abc import Callable

# (seconds of one run, runs expected) of a SmolLM2 conversion on a quiet 2-core machine
PLAN = {"profile": (60.0, 1), "train": (10.0, 2), "candidate": (6.0, 3), "down_t": (7.0, 2),
        "decide": (24.0, 1), "write": (3.0, 1)}


class JobBar:
    def __init__(self, plan: dict[str, tuple[float, int]], enabled: bool = True):
        self.plan = dict(plan)
        self._runs = dict.fromkeys(plan, 0)
        self._bar = None
        self._stage_left = 0.0
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=sum(w * n for w, n in self.plan.values()), desc="convert", leave=False,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]")

    def stage(self, key: str, label: str, items: int) -> Callable[[int], None]:
        """Start a run of stage `key` of `items` items; returns its tick."""
        if self._bar is None:
            return lambda n=1: None
        self._finish_stage()
        weight, planned = self.plan.get(key, (1.0, 0))
        self._runs[key] = self._runs.get(key, 0) + 1
        if self._runs[key] > planned:
            self._bar.total += weight
        self._bar.set_postfix_str(label, refresh=True)
        per = weight / max(items, 1)
        self._stage_left = weight

        def tick(n: int = 1) -> None:
            step = min(per * n, self._stage_left)
            self._stage_left -= step
            self._bar.update(step)
        return tick

    def _finish_stage(self) -> None:
        if self._stage_left > 0:  # a run that ended early (fewer items than planned)
            self._bar.update(self._stage_left)
            self._stage_left = 0.0

    def close(self) -> None:
        if self._bar is not None:
            self._finish_stage()
            self._bar.close()
            self._bar = None
