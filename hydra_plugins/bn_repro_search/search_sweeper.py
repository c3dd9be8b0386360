"""``hydra/sweeper=search``: Optuna's TPE search over a study's settings, as a Hydra sweeper.

    python -m experiments.mnist -m hydra/sweeper=lr_search hydra.sweeper.n_trials=8 ...

Each trial is one job of the sweep (any launcher); its objective is what the study's entry point
returns: the mean final test accuracy of its runs (``direction: maximize``). A trial that fails
(its runs diverged and returned no accuracy, or the job failed) is recorded as failed with its
reason and the search goes on. The search space is ``params``, in Hydra's sweep syntax:
``interval(a, b)`` (a float; ``tag(log, interval(a, b))`` on a log scale; ``int(interval(a, b))``
an integer), ``choice(a, b, ...)`` or ``range(a, b)``; a range given on the command line
(``'norm.momentum=interval(0.01, 0.5)'``, as Hydra's Optuna sweeper takes it) joins ``params``, and
replaces a ``params`` entry of the same key. A space that cannot be searched (``interval(1, 0.1)``,
``glob(*)``) ends the search in one line before any trial. After each batch of trials,
and so also on Ctrl-C, ``optimization_results.yaml`` in the sweep folder holds the best trial so
far and every trial recorded (written whole: an interrupt never leaves half a file).

``storage`` (an Optuna storage URL, ``sqlite:///search.db``) with ``study_name`` keeps the trials in
a database, so an interrupted search is resumed by running the same command again: it loads the
trials recorded under that name and runs until ``n_trials`` have finished, numbering on from the
last. A trial a Ctrl-C cut short is recorded as failed ("interrupted") and not counted; the
resumed sampler's seed is ``seed`` plus the trials recorded, so it does not repeat their draws.

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

from experiments.kit.errors import ConfigError
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
    storage: str | None = None  # an Optuna storage URL (sqlite:///search.db): a resumable search
    study_name: str | None = None  # the search's name in storage (needed with it)


ConfigStore.instance().store(
    group="hydra/sweeper", name="search", node=SearchConf, provider="bn-repro"
)


class SearchSweeper(Sweeper):
    def __init__(
        self,
        direction: str,
        n_trials: int,
        n_jobs: int,
        seed: int,
        params: dict[str, str],
        storage: str | None = None,
        study_name: str | None = None,
    ) -> None:
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"hydra.sweeper.direction={direction} must be maximize or minimize")
        if n_trials < 1 or n_jobs < 1:
            raise ValueError("hydra.sweeper.n_trials and hydra.sweeper.n_jobs must be at least 1")
        if storage and not study_name:
            raise ValueError("hydra.sweeper.storage needs hydra.sweeper.study_name to resume by")
        self.direction, self.n_trials, self.n_jobs, self.seed = direction, n_trials, n_jobs, seed
        self.params = dict(params)
        self.storage, self.study_name = storage, study_name

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        import optuna

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        given = parser.parse_overrides(arguments)
        fixed = [o for o in given if not o.is_sweep_override()]
        ranges = {o.key_or_group: o for o in given if o.is_sweep_override()}
        space = parser.parse_overrides([f"{k}={v}" for k, v in self.params.items()])
        space = [o for o in space if o.key_or_group not in ranges] + list(ranges.values())
        if not space:
            sys.exit("error: nothing to search: give hydra.sweeper.params or a range on the "
                     "command line ('train.lr=interval(0.01, 1.0)')")  # fmt: skip
        for o in space:
            if problem := _unsearchable(o):
                where = "" if o.key_or_group in ranges else "hydra.sweeper.params: "
                sys.exit(f"error: {where}{problem}")
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            study = self._study()
        except ConfigError as e:
            sys.exit(f"error: {e}")
        results = sweep_dir / "optimization_results.yaml"
        done = sum(map(_finished, study.trials))
        if done >= self.n_trials:  # a search resumed once complete: its results, no trial
            _write_results(study, space, results)
        while done < self.n_trials:
            trials = [study.ask() for _ in range(min(self.n_jobs, self.n_trials - done))]
            batch = [
                [o.input_line for o in fixed]
                + [f"{o.key_or_group}={_suggest(t, o)}" for o in space]
                for t in trials
            ]
            try:
                returns = self.launcher.launch(batch, trials[0].number)
            except BaseException:
                for trial in trials:  # recorded, so a resumed search neither counts nor waits on it
                    trial.set_user_attr("fail_reason", "interrupted")
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                raise
            for trial, job, ret in zip(trials, batch, returns):
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

    def _study(self) -> Any:
        """A new Optuna study, or with ``storage`` the one recorded under ``study_name`` (created
        when there is none); ConfigError if the storage cannot be opened or the recorded search
        went the other direction."""
        import optuna

        try:
            study = optuna.create_study(
                direction=self.direction,
                storage=self.storage,
                study_name=self.study_name,
                load_if_exists=True,
            )
        except Exception as e:  # the storage's own errors (SQLAlchemy's, Redis's, ...)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"hydra.sweeper.storage={self.storage} cannot be opened: {first}"
            ) from None
        if study.direction.name.lower() != self.direction:
            raise ConfigError(
                f"the search {self.study_name} in {self.storage} was to "
                f"{study.direction.name.lower()}; hydra.sweeper.direction={self.direction} "
                "cannot continue it"
            )
        # a seed of its own for a resumed search: the first one's would draw the same settings again
        study.sampler = optuna.samplers.TPESampler(seed=self.seed + len(study.trials))
        return study


def _finished(trial: Any) -> bool:
    """Whether ``trial`` counts toward ``n_trials``: its job ended (not cut short)."""
    import optuna

    state = trial.state
    if state == optuna.trial.TrialState.FAIL:
        return trial.user_attrs.get("fail_reason") != "interrupted"
    return state == optuna.trial.TrialState.COMPLETE


def _unsearchable(override: Override) -> str | None:
    """Why a search range cannot be searched (an empty or inverted interval, a log scale
    reaching 0, a sweep that is not a range), or None."""
    sweep = override.value()
    if not isinstance(sweep, (IntervalSweep, ChoiceSweep, RangeSweep)):
        return f"{override.input_line}: use interval(a, b), choice(a, b, ...) or range(a, b)"
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
