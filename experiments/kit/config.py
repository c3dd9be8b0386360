"""Typed configs shared by every study, their cross-field checks, and the study runner.

The shared groups (``norm``, ``data``, ``logger``) and the keys every study has (``seed``,
``train.steps``, ``eval.every``, ...) are dataclasses. A study's root schema extends
:class:`StudyConf` and is registered in Hydra's ConfigStore (:func:`register`); its root YAML
lists it first in ``defaults``, so a misspelled key or a value of the wrong type (``train.steps=abc``,
``data.binarize=maybe``, ``norm.kind=batchnrom``) is rejected by Hydra before anything runs.
What a type cannot say (a microbatch that divides the batch, ...) is checked by
:func:`check_common` and the study's own short check, with a one-line :class:`ConfigError`.
"""

from __future__ import annotations

import enum
import logging
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from bn import factory, schedules
from experiments.kit.errors import ConfigError, OneLineError
from experiments.kit.stopping import StopConf
from experiments.kit.trainable import TRAINABLE


class Choice(str, enum.Enum):
    """A closed set of string values (a ``Literal`` that OmegaConf can check): compares equal
    to its value and prints as it, so code and messages use it as the plain string."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# Weight normalization (Salimans & Kingma 2016) alone and with mean-only BN: kinds of the norm
# group that reparameterize the layers before the norm slot (experiments/kit/norm.py).
WEIGHT_NORM_KINDS = ("weightnorm", "weightnorm_meanonly")
NormKind = Choice(
    "NormKind",
    {k: k for k in (*factory.NAMES, *WEIGHT_NORM_KINDS)},
)
Impl = Choice("Impl", {k: k for k in ("fast", "reference")})
NormPosition = Choice("NormPosition", {k: k for k in ("before", "after")})  # of the nonlinearity
RenormAblation = Choice(
    "RenormAblation", {k: k for k in ("bn_forward_r_grad", "renorm_forward_bn_grad")}
)
ScheduleKind = Choice("ScheduleKind", {k: k for k in ("paper", "fixed")})
DataName = Choice(
    "DataName",
    {
        k: k
        for k in (
            "mnist",
            "fashion_mnist",
            "image_folder",
            "mnist_triples",
            "fashion_mnist_triples",
        )
    },
)
# train.trainable of the studies that offer it (experiments.kit.trainable): which parameters train
Trainable = Choice("Trainable", {k: k for k in TRAINABLE})
LoggerMode = Choice("LoggerMode", {k: k for k in ("online", "offline", "disabled")})

BATCH_NORMS = ("batchnorm", "batchrenorm", "torch_batchnorm")


@dataclass
class ScheduleConf:
    """Batch Renorm's ``r_max``/``d_max`` (``kind: paper`` ramps or ``fixed`` values)."""

    kind: ScheduleKind = ScheduleKind.paper
    warmup: int = schedules.WARMUP  # the paper's values: bn.schedules is their one source
    r_max: float = schedules.R_MAX
    r_max_step: int = schedules.R_MAX_STEP
    d_max: float = schedules.D_MAX
    d_max_step: int = schedules.D_MAX_STEP
    paper_steps: int | None = schedules.PAPER_STEPS


@dataclass
class NormConf:
    """``configs/norm/*.yaml``: the normalization layer every study builds the same way
    (:func:`experiments.kit.norm.norm_factory`)."""

    kind: NormKind = MISSING
    momentum: float | None = 0.1
    eps: float = 1e-5
    impl: Impl = Impl.fast
    microbatch: int | None = None
    sync_stats: bool = False
    fix_gamma: bool = False
    groups: int = 32
    schedule: ScheduleConf = field(default_factory=ScheduleConf)
    ablation: RenormAblation | None = None  # batchrenorm: bn.BatchRenorm2d's gradient ablations


@dataclass
class DataConf:
    """``configs/data/*.yaml``."""

    name: DataName = MISSING
    root: str = MISSING
    download: bool = MISSING
    verify: bool = True
    binarize: bool = MISSING
    image_size: int | None = None
    channels: int = 1
    num_workers: int = 8


@dataclass
class LoggerConf:
    """``configs/logger/wandb.yaml``."""

    mode: LoggerMode = MISSING
    project: str = MISSING
    entity: str | None = MISSING
    dir: str | None = MISSING
    group: str | None = MISSING
    tags: list[str] = MISSING


@dataclass
class TrainConf:
    steps: int = MISSING
    batch_size: int = MISSING
    lr: float = MISSING


@dataclass
class EvalConf:
    every: int = MISSING
    batch_size: int = 1000


@dataclass
class ClassifierTrainConf(TrainConf):
    """``train`` of a study on :mod:`experiments.kit.classify`'s loop."""

    momentum: float = 0.9
    grad_clip: float | None = None
    channels_last: bool = True
    stop: StopConf = field(default_factory=StopConf)


@dataclass
class ClassifierEvalConf(EvalConf):
    train_subset: int = 5000  # training examples for train/acc (inference mode); 0 skips it
    # > 0: every evaluation measures test/acc_subset on this many test examples (the same ones
    # each time) and the full test set (test/acc) is measured once, at the end; 0: test/acc always
    test_subset: int = 0


@dataclass
class StudyConf:
    """The keys every study has; a study's schema extends it (and its ``train``/``eval``).

    A study's schema names in ``resume_safe`` its own settings that do not change what a run
    computes (a probe's measurements, ...): a resumed run may change them, and they are no part
    of the run's identity (:mod:`experiments.kit.identity`). Flat keys; ``"probe."`` is a group.
    """

    resume_safe: ClassVar[tuple[str, ...]] = ()  # not a setting: a class attribute of the schema
    seed: Any = MISSING
    threads: int | None = None
    device: str = "auto"
    resume: bool = False
    overwrite: bool = False  # true: a run may replace the files of an earlier run in its directory
    data: DataConf = field(default_factory=DataConf)
    norm: NormConf = field(default_factory=NormConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    train: TrainConf = field(default_factory=TrainConf)
    eval: EvalConf = field(default_factory=EvalConf)


# A folder per study, and the groups they share.
CONFIGS = Path(__file__).resolve().parents[2] / "configs"

# What configs/kit.yaml's sweep folder names use: a seed list as 0-1-2, and the job's other
# settings (Hydra's override_dirname) after an underscore when there are any.
for _name, _resolver in {
    "kit_seeds": lambda seed: (
        "-".join(map(str, seed)) if isinstance(seed, (list, ListConfig)) else str(seed)
    ),
    "kit_tail": lambda rest: f"_{rest}" if rest else "",
    # each study's root config finds the shared groups (data/, norm/, logger/) through this
    "kit_configs": lambda: str(CONFIGS),
}.items():
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)

# The groups in configs/ that every study shares (``hydra``: the search sweeper's settings).
SHARED_GROUPS = ("data", "norm", "logger", "hydra")


class _SharedConfigs(FileConfigSource):
    """``configs/`` as a Hydra config source that holds :data:`SHARED_GROUPS` alone, not the
    studies' own folders (which would be groups of it: ``renorm/setup``, ...)."""

    @staticmethod
    def scheme() -> str:
        return "bn-repro-shared"

    def is_group(self, config_path: str) -> bool:
        return _is_shared(config_path) and super().is_group(config_path)

    def is_config(self, config_path: str) -> bool:
        return _is_shared(config_path) and super().is_config(config_path)


def _is_shared(config_path: str) -> bool:
    top = config_path.strip("/").split("/")[0]
    return top == "" or top in SHARED_GROUPS


class _SharedGroupsSearchPath(SearchPathPlugin):
    """Puts the shared groups in every study's base search path. A study's root YAML adds
    configs/ through ``hydra.searchpath``, which composes them, but ``--help`` (and
    ``--hydra-help``) list the groups of the base search path alone: without this, a study's
    help named its own groups (setup, debug, ...) and not data, norm or logger."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="bn-repro", path=f"{_SharedConfigs.scheme()}://{CONFIGS}")


Plugins.instance().register(_SharedConfigs)
Plugins.instance().register(_SharedGroupsSearchPath)


def resume_safe(cfg: DictConfig) -> tuple[str, ...]:
    """The settings of ``cfg``'s study that a resume may change (its schema's
    :attr:`StudyConf.resume_safe`); none for a config that no study's schema types."""
    schema = OmegaConf.get_type(cfg)
    return schema.resume_safe if isinstance(schema, type) and issubclass(schema, StudyConf) else ()


def register(study: str, schema: type) -> None:
    """Make ``schema`` the ``<study>_schema`` that the study's root YAML extends."""
    ConfigStore.instance().store(name=f"{study}_schema", node=schema)
    _SCHEMAS[study] = schema


def require(checks: Iterable[tuple[bool, str]]) -> None:
    """Raise :class:`ConfigError` with the message of the first failed ``(ok, message)``."""
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def seed_list(seed) -> list[int]:
    """``cfg.seed`` (an int or a list of ints) as a list."""
    return list(seed) if isinstance(seed, (list, tuple, ListConfig)) else [seed]


def seed_dirs(seed, out_dir: Path) -> list[tuple[int, Path]]:
    """``(seed, its run directory)`` for each seed of ``cfg.seed``, each directory made: one
    seed writes to ``out_dir`` itself, a list (seeds side by side) to ``out_dir/seed<k>/``."""
    seeds = seed_list(seed)
    dirs = [out_dir] if isinstance(seed, int) else [out_dir / f"seed{s}" for s in seeds]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return list(zip(seeds, dirs))


def setup_name() -> str:
    """The run's setup: Hydra's choice of the ``setup`` group (its file name)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices["setup"]
    return "run"  # a config composed outside a Hydra app, without its runtime choices


def check_common(cfg: DictConfig) -> None:
    """The checks every study shares: the seeds, every numeric setting in its range (the one
    table, :data:`experiments.kit.ranges.RANGES`), and the rules that tie settings together (the
    norm fits the batch, the ramp starts after its warm-up)."""
    from experiments.kit.ranges import check_ranges

    t, n = cfg.train, cfg.norm
    seeds = seed_list(cfg.seed)
    require(
        [
            (
                len(seeds) >= 1
                and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds),
                f"seed={cfg.seed} must be an integer >= 0 or a list of them, e.g. seed=[0,1,2]",
            ),
            (len(set(seeds)) == len(seeds), f"seed={seeds} has repeated seeds"),
        ]
    )
    check_ranges(cfg)
    require(
        [
            (
                n.microbatch is None or n.kind in BATCH_NORMS[:2],
                f"norm.microbatch={n.microbatch} only applies to batchnorm/batchrenorm; {n.kind} "
                "normalizes each example on its own (set norm.microbatch=null)",
            ),
            (
                n.microbatch is None or (n.microbatch >= 2 and t.batch_size % n.microbatch == 0),
                f"norm.microbatch={n.microbatch} must be at least 2 and divide "
                f"train.batch_size={t.batch_size}",
            ),
            (
                n.kind not in BATCH_NORMS or t.batch_size >= 2,
                f"train.batch_size={t.batch_size} gives {n.kind} one value per unit, so no batch "
                "variance: use train.batch_size >= 2 or norm=none",
            ),
            (
                n.ablation is None or n.kind == "batchrenorm",
                f"norm.ablation={n.ablation} is an ablation of batchrenorm, not of {n.kind}",
            ),
            *(
                (
                    getattr(n.schedule, key) >= n.schedule.warmup,
                    f"norm.schedule.{key}={getattr(n.schedule, key)} must not come before "
                    f"norm.schedule.warmup={n.schedule.warmup} (the ramp starts after the warm-up)",
                )
                for key in ("r_max_step", "d_max_step")
            ),
        ]
    )


_SCHEMAS: dict[str, type] = {}  # by study, from register()


def _override_value(value: str) -> str:
    """An override's value as Hydra reads it (unquoted); ``value`` itself if Hydra cannot."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        read = OverridesParser.create().parse_override(f"key={value}").value()
    except Exception:  # Hydra's own parse reports it, in its words
        return value
    return read if isinstance(read, str) else value


def preflight(study: str, argv: list[str] | None = None, objective: bool = True) -> None:
    """Checks of the command line that must come before Hydra composes the config or creates the
    run directory, each one line: a ``hydra.run.dir`` that is a file (left untouched), a setup the
    study does not have, ``~setup``, a key
    added with ``+`` that the study's schema does not have (Hydra's ``+`` adds any key silently),
    and ``--cfg hydra --resolve`` (the run folder's name needs the study's config); a search
    (``hydra/sweeper=...``) of a study whose entry point returns no ``objective``."""
    args = sys.argv[1:] if argv is None else argv
    sweepers = [a.split("=", 1)[1] for a in args if a.startswith("hydra/sweeper=")]
    if not objective and any(s != "basic" for s in sweepers):
        sys.exit(
            f"error: {study} returns no objective to search (it measures, it does not classify): "
            "sweep it with -m and the basic sweeper"
        )
    if "--resolve" in args and any(a in ("--cfg", "-c") for a in args) and "hydra" in args:
        sys.exit("error: --cfg hydra --resolve cannot resolve the run folder's name (it reads the "
                 "study's config); use --cfg hydra, or --cfg all --resolve")  # fmt: skip
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+") in ("hydra.run.dir", "hydra.sweep.dir"):
            value = _override_value(value)
            if Path(value).is_file():
                sys.exit(f"error: {key}={value} is a file; give a folder for the run")
            if not _writable(Path(value)):
                sys.exit(
                    f"error: {key}={value} cannot be written (permissions); give a folder you can "
                    "write"
                )
        if key == "~setup":
            sys.exit(
                f"error: every {study} run has a setup; choose one (setup=...) instead of ~setup"
            )
        if key.lstrip("+") == "setup" and not value.startswith(("glob(", "choice(", "range(")):
            for name in value.split(","):
                _check_setup(study, name.strip())
        if key.startswith("+") and not key.startswith("++") and "." in key:
            _check_schema_has(study, key[1:], arg)


def _writable(path: Path) -> bool:
    """Whether ``path`` can be created or written into: its nearest existing folder is writable."""
    import os

    for folder in (path, *path.resolve().parents):
        if folder.exists():
            return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
    return True


def _setup_file(study: str, name: str) -> tuple[dict, list[str]]:
    """``configs/<study>/setup/<name>.yaml`` (empty if there is none) and the setups it extends
    (its ``defaults`` in the same group)."""
    import yaml

    path = CONFIGS / study / "setup" / f"{name}.yaml"
    node = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    parents = [d for d in node.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return node, parents


def setups(study: str) -> list[str]:
    """The setups of ``study``: the files of ``configs/<study>/setup/``."""
    return sorted(p.stem for p in (CONFIGS / study / "setup").glob("*.yaml"))


def setup_settings(study: str, name: str) -> set[str]:
    """The dotted keys ``configs/<study>/setup/<name>.yaml`` sets, with those of the setups it
    extends; a ``override /<group>: ...`` sets every key under ``<group>``, written ``<group>.``."""
    node, parents = _setup_file(study, name)
    keys: set[str] = set()

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            keys.add(prefix)

    walk({k: v for k, v in node.items() if k != "defaults"}, "")
    for parent in parents:
        keys |= setup_settings(study, parent)
    for entry in node.get("defaults", []):
        if isinstance(entry, dict):
            keys |= {f"{group.split()[-1].strip('/')}." for group in entry}
    return keys


def _check_setup(study: str, name: str) -> None:
    """One line for a setup the study does not have, naming the study's own (and the study that
    has it, if one does), rather than Hydra's multi-line listing."""
    if name in setups(study):
        return
    owners = sorted(p.parent.parent.name for p in CONFIGS.glob(f"*/setup/{name}.yaml"))
    where = f" (a setup of {', '.join(owners)})" if owners else ""
    sys.exit(
        f"error: setup={name} is not a setup of {study}{where}; its setups: "
        f"{', '.join(setups(study))} (configs/{study}/setup/)"
    )


def _check_schema_has(study: str, key: str, arg: str) -> None:
    """Refuse ``+a.b=...`` when ``a`` is a typed node of the schema without a field ``b``."""
    import dataclasses
    import typing

    node: Any = _SCHEMAS.get(study)
    *parents, last = key.split(".")
    for part in parents:
        if not dataclasses.is_dataclass(node):
            return  # an open dict: any key may be added
        fields = {f.name: f for f in dataclasses.fields(node)}
        if part not in fields:
            break
        node = typing.get_type_hints(node).get(part)
    else:
        if not dataclasses.is_dataclass(node) or last in {f.name for f in dataclasses.fields(node)}:
            return
    sys.exit(
        f"error: {arg}: {study} has no setting {key} (a misspelling?); `{study} --help` lists them"
    )


# What torch.save's writer says on a full disk or a vanished folder: a failed write, or (the
# zip writer finding fewer bytes on disk than it wrote) "unexpected pos 123 vs 456"
STORAGE_ERRORS = ("PytorchStreamWriter", "file write failed", "No space left", "unexpected pos")


def storage_error(e: BaseException) -> bool:
    """Whether ``e`` (a RuntimeError from torch.save) is a file of the run failing to be written."""
    return any(t in str(e) for t in STORAGE_ERRORS)


def run_study(
    train: Callable[[DictConfig, Path], dict | list[dict]], cfg: DictConfig
) -> float | None:
    """The body of every study's Hydra ``main``: train into the Hydra run directory. A bad
    setting, missing or broken data, an unset mandatory value or a run directory that cannot be
    written ends the run with a one-line message instead of a traceback; what the run wrote
    before stays written. A single run exits with 1; a job of a sweep returns (None), so the
    sweep's other jobs run, and the sweep ends by naming it (:mod:`experiments.kit.jobs`).
    Returns the mean final test accuracy (what a sweeper optimizes), or None if any run has
    none (it diverged): the survivors' mean would score a setting by its luckiest seeds."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf.errors import MissingMandatoryValue

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        result = train(cfg, out_dir)
    except OneLineError as e:  # a bad setting, data that cannot be had, ...
        return _fail(str(e))
    except MissingMandatoryValue as e:
        return _fail(
            f"{e.full_key} has no value (???): set it on the command line, e.g. {e.full_key}=..."
        )
    except OSError as e:  # e.g. hydra.run.dir names a file, or the disk is full
        return _fail(f"{e.strerror or e}: {e.filename or ''} (choose another hydra.run.dir?)")
    except RuntimeError as e:
        if not storage_error(e):
            raise
        return _fail(
            f"could not write a file of the run in {out_dir} ({str(e).strip().splitlines()[0]}): is the disk full?"
        )
    except Exception as e:
        if type(e).__name__ != "DecompressionBombError":  # PIL's: an image too large to trust
            raise
        return _fail(f"{e} (an image of the data set: remove or shrink it)")
    summaries = result if isinstance(result, list) else [result]
    accs = [s["test_acc"] for s in summaries if s.get("test_acc") is not None]
    mean = statistics.fmean(accs) if accs else None
    missing = len(summaries) - len(accs)
    # Hydra's logging: the console (with or without a terminal) and the job's <name>.log
    logging.getLogger(HydraConfig.get().job.name).info(
        "done: %s%s; results in %s",
        f"final test accuracy {mean:.4f} (mean of {len(accs)})"
        if accs
        else "no accuracy (see summary.json)",
        f", {missing} of {len(summaries)} runs without one (diverged): no objective"
        if accs and missing
        else "",
        out_dir,
    )
    return None if missing else mean


def _fail(reason: str) -> None:
    """A single run: exit with the one line. A sweep's job: print it, record it, go on."""
    from experiments.kit import jobs

    if not jobs.in_sweep():
        sys.exit(f"error: {reason}")
    print(f"error: {reason}", file=sys.stderr)
    jobs.record_failure(reason)
