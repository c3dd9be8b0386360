"""``hydra/sweeper=search``: Optuna's TPE search over a study's settings, as a Hydra sweeper.

    python -m experiments.mnist -m hydra/sweeper=lr_search hydra.sweeper.n_trials=8 ...

Each trial is one job of the sweep (any launcher); its objective is what the study's entry point
returns: the mean final test accuracy of its runs (``direction: maximize``). A trial that fails
(its runs diverged and returned no accuracy, or the job failed) is recorded as failed with its
reason and the search goes on. The search space is ``params``, in Hydra's sweep syntax:
``interval(a, b)`` (a float; ``tag(log, interval(a, b))`` on a log scale; ``int(interval(a, b))``
an integer), ``choice(a, b, ...)`` or ``range(a, b)``; a space that cannot be searched
(``interval(1, 0.1)``) ends the search in one line before any trial. After each batch of trials,
and so also on Ctrl-C, ``optimization_results.yaml`` in the sweep folder holds the best trial so
far and every trial recorded (written whole: an interrupt never leaves half a file).

(Hydra's own Optuna sweeper is not used: its release for Hydra 1.3 ends a search at the first
failed trial, and the one that goes on needs Hydra 1.4 prereleases.)
"""

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from experiments.kit.files import write_whole

log = logging.getLogger(__name__)


@dataclass
class SearchConf:
    _target_: str = "hydra_plugins.bn_repro_search.search_sweeper.SearchSweeper"
    direction: str = "maximize"  # the objective: what the entry point returns (mean test accuracy)
    n_trials: int = 8
    n_jobs: int = 1  # trials launched together (as many as the launcher runs side by side)
    seed: int = 0  # the sampler's: the same search, trial for trial
    params: dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/sweeper", name="search", node=SearchConf, provider="bn-repro"
)


class SearchSweeper(Sweeper):
    def __init__(
        self, direction: str, n_trials: int, n_jobs: int, seed: int, params: dict[str, str]
    ) -> None:
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"hydra.sweeper.direction={direction} must be maximize or minimize")
        if n_trials < 1 or n_jobs < 1:
            raise ValueError("hydra.sweeper.n_trials and hydra.sweeper.n_jobs must be at least 1")
        if not params:
            raise ValueError("hydra.sweeper.params is empty: name the settings to search")
        self.direction, self.n_trials, self.n_jobs, self.seed = direction, n_trials, n_jobs, seed
        self.params = dict(params)

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        import optuna

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        fixed = parser.parse_overrides(arguments)
        if swept := [o.input_line for o in fixed if o.is_sweep_override()]:
            raise ValueError(f"{swept}: a search takes fixed settings; search ranges go in params")
        space = parser.parse_overrides([f"{k}={v}" for k, v in self.params.items()])
        if problem := next(filter(None, map(_unsearchable, space)), None):
            sys.exit(f"error: hydra.sweeper.params: {problem}")
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            direction=self.direction, sampler=optuna.samplers.TPESampler(seed=self.seed)
        )
        results = sweep_dir / "optimization_results.yaml"
        done = 0
        while done < self.n_trials:
            trials = [study.ask() for _ in range(min(self.n_jobs, self.n_trials - done))]
            batch = [
                [o.input_line for o in fixed]
                + [f"{o.key_or_group}={_suggest(t, o)}" for o in space]
                for t in trials
            ]
            for trial, job, ret in zip(trials, batch, self.launcher.launch(batch, done)):
                value, reason = _objective(ret)
                if value is None:
                    trial.set_user_attr("fail_reason", reason)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    log.warning(f"trial {trial.number} ({' '.join(job)}) failed: {reason}")
                else:
                    study.tell(trial, value)
                    log.info(f"trial {trial.number} ({' '.join(job)}): {value:.4f}")
            done += len(trials)
            _write_results(study, space, results, final=done >= self.n_trials)


def _unsearchable(override: Override) -> str | None:
    """Why a ``params`` entry cannot be searched (an empty or inverted interval, a log scale
    reaching 0), or None."""
    sweep = override.value()
    if not isinstance(sweep, IntervalSweep):
        return None
    if not sweep.start < sweep.end:
        return f"{override.input_line}: the interval's low end must be below its high end"
    if "log" in sweep.tags and sweep.start <= 0:
        return f"{override.input_line}: a log scale needs a positive low end"
    return None


def _suggest(trial: Any, override: Override) -> Any:
    """Optuna's suggestion for one ``params`` entry, in Hydra's sweep syntax."""
    name, sweep = override.key_or_group, override.value()
    if isinstance(sweep, IntervalSweep):
        log_scale = "log" in sweep.tags
        if isinstance(sweep.start, int) and isinstance(sweep.end, int):
            return trial.suggest_int(name, sweep.start, sweep.end, log=log_scale)
        return trial.suggest_float(name, float(sweep.start), float(sweep.end), log=log_scale)
    if isinstance(sweep, ChoiceSweep):
        return trial.suggest_categorical(name, list(sweep.list))
    if isinstance(sweep, RangeSweep):
        return trial.suggest_categorical(name, list(override.sweep_iterator()))
    raise ValueError(f"{override.input_line}: use interval(a, b), choice(a, b, ...) or range(a, b)")


def _objective(ret: JobReturn) -> tuple[float | None, str]:
    """The trial's value, or None and why it has none."""
    if ret.status != JobStatus.COMPLETED:
        return None, f"{type(ret._return_value).__name__}: {ret._return_value}"
    value = ret._return_value
    if value is None:
        return None, "no objective (its runs diverged, or the job refused its settings)"
    if not math.isfinite(float(value)):
        return None, f"objective {value}"
    return float(value), ""


def _write_results(study: Any, space: list[Override], path: Path, final: bool = True) -> None:
    """The trials so far, and the best of them, as YAML at ``path``, replaced whole; ``final``
    logs the best (the search has ended)."""
    import optuna

    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    trials = [
        {"number": t.number, "params": t.params, "value": t.value, "state": t.state.name,
         "reason": t.user_attrs.get("fail_reason")}
        for t in study.trials
    ]  # fmt: skip
    results: dict[str, Any] = {"direction": study.direction.name.lower(), "trials": trials}
    results["searched"] = [o.input_line for o in space]
    if complete:
        best = study.best_trial
        results.update(best_value=best.value, best_params=best.params)
        if final:
            log.info(f"best of {len(complete)} trials: {best.value:.4f} with {best.params}")
    elif final:
        log.warning("no trial completed: no best settings")
    text = OmegaConf.to_yaml(OmegaConf.create(results))
    write_whole(path, lambda f: f.write(text))
