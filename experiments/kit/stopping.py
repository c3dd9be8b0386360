"""When a run may stop before ``train.steps``: on reaching a target, or on a plateau.

The BN paper trains Inception "until it stops improving" and counts how many steps each BN
variant needs to reach Inception's maximum. Both ends are rules on an evaluated metric's curve
(``train.stop``); ``train.steps`` stays the cap. The curve is the rule's state: it is
checkpointed with the run, so a resumed run stops where an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StopConf:
    """``train.stop``: end a run before ``train.steps`` (the cap) on its test-accuracy curve
    (:class:`StopRule`); ``null`` switches a rule off."""

    target: float | None = None  # at the first evaluation that reaches this accuracy
    plateau: float | None = None  # when the last third of the run gained less than this
    min_steps: int = 0  # the plateau rule waits until this step


def plateaued(curve: list[tuple[int, float]], min_gain: float) -> bool:
    """True when the best value of the last third of the run (after step ``2/3 · s``, ``s``
    the last step) beats the best value before it by less than ``min_gain``."""
    if not curve:
        return False
    cut = curve[-1][0] * 2 / 3
    before = [v for step, v in curve if step <= cut]
    after = [v for step, v in curve if step > cut]
    return bool(before and after) and max(after) - max(before) < min_gain


@dataclass
class StopRule:
    """``train.stop``: stop at the first evaluation where ``metric`` reaches ``target``, or,
    from ``min_steps`` on, where the curve has ``plateaued`` by less than ``plateau``.
    ``None`` switches a rule off."""

    metric: str
    target: float | None = None
    plateau: float | None = None
    min_steps: int = 0
    curve: list[tuple[int, float]] | None = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.target is not None or self.plateau is not None

    def update(self, step: int, metrics: dict[str, float]) -> str | None:
        """Record this evaluation; the reason to stop now, or ``None`` to go on."""
        if self.metric not in metrics:
            return None
        value = metrics[self.metric]
        self.curve.append((step, value))
        if self.target is not None and value >= self.target:
            return f"target: {self.metric}={value:.4f} reached {self.target:.4f} at step {step}"
        if (
            self.plateau is not None
            and step >= self.min_steps
            and plateaued(self.curve, self.plateau)
        ):
            best = max(v for _, v in self.curve)
            return (
                f"plateau: {self.metric} gained less than {self.plateau} over the last third "
                f"(best {best:.4f}) at step {step}"
            )
        return None

    def state_dict(self) -> dict:
        return {"metric": self.metric, "curve": list(self.curve)}

    def load_state_dict(self, state: dict | None) -> None:
        """The curve of a checkpoint. ``None`` when it holds none of this metric (saved without
        a rule, or of another metric): the caller rebuilds it from the run's log."""
        curve = state["curve"] if state is not None and state.get("metric") == self.metric else None
        self.curve = None if curve is None else [(int(s), float(v)) for s, v in curve]
