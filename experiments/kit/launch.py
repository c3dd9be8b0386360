"""The command line that launched a run, as its folder records it: Hydra's overrides
(``.hydra/overrides.yaml``, a resume's under ``.hydra/resumed_at_step_<N>/``) or the command in
its ``summary.json``.

A run's ``summary.json`` records its settings (``config``), but runs made before the stopping
rule (``train.stop.*``) was recorded leave it out, as every run records a rule left at its
default: read alone, such a run looks like one without a rule. Its overrides still name the rule
it ran with (the rules are set only on the command line), so the collection reads them from
there (:func:`config_with_stop_rule`) before it pools runs as seeds of one setting.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from experiments.kit.errors import CollectError
from experiments.kit.identity import stop_defaults

_RESUMED = re.compile(r"resumed_at_step_(\d+)")


def _overrides_file(run: Path, seed: Any) -> Path | None:
    """The overrides of the run's last launch: its last resume's, else its first's. In the run's
    folder, or the folder above for one of several seeds trained side by side (``seed<k>/``)."""
    folders = [run] + ([run.parent] if run.name == f"seed{seed}" else [])
    for folder in folders:
        settings = folder / ".hydra"
        resumes = [
            (int(m.group(1)), p)
            for p in settings.glob("resumed_at_step_*")
            if (m := _RESUMED.fullmatch(p.name)) and (p / "overrides.yaml").is_file()
        ]
        if resumes:
            return max(resumes)[1] / "overrides.yaml"
        if (settings / "overrides.yaml").is_file():
            return settings / "overrides.yaml"
    return None


def launch_overrides(run: Path, summary: dict) -> tuple[list[str], str] | None:
    """The overrides of the command that last launched the run in ``run`` (whose summary is
    ``summary``) and where they were read; None where its folder records no command."""
    if (path := _overrides_file(run, summary.get("seed"))) is not None:
        try:
            overrides = yaml.safe_load(path.read_text())
        except (OSError, ValueError, yaml.YAMLError) as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CollectError(f"{path} cannot be read ({why}): move that run away") from None
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise CollectError(f"{path} is not a list of Hydra overrides: move that run away")
        return overrides, str(path)
    command = summary.get("resumed_with_command") or summary.get("command")
    try:
        words = shlex.split(str(command or ""))
    except ValueError as e:
        raise CollectError(
            f"{run / 'summary.json'} records a command that cannot be read ({e}): move that "
            "run away"
        ) from None
    if len(words) < 3 or words[:2] != ["python", "-m"]:
        return None
    return words[3:], f"the command in {run / 'summary.json'}"


def _flat(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {
            k: v for name, item in value.items() for k, v in _flat(f"{key}.{name}", item).items()
        }
    return {key: value}


def stop_settings(overrides: list[str], source: str) -> dict[str, Any]:
    """The stopping settings (``train.stop.*``, flat) that ``overrides`` set, read as Hydra
    reads them; a deleted one is at its default."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    defaults = stop_defaults()
    wanted = [o for o in overrides if "train.stop" in o]
    try:
        parsed = OverridesParser.create().parse_overrides(wanted)
    except HydraException as e:
        message = str(e).strip().splitlines()[0]
        raise CollectError(f"{source} holds an override Hydra cannot read ({message})") from None
    found: dict[str, Any] = {}
    for o in parsed:
        key = o.key_or_group
        if key != "train.stop" and not key.startswith("train.stop."):
            continue
        if o.is_delete():
            found.update({k: v for k, v in defaults.items() if k == key or k.startswith(key + ".")})
        else:
            found.update(_flat(key, o.value()))
    return {k: v for k, v in found.items() if k in defaults}


def config_with_stop_rule(run: Path, summary: dict) -> dict[str, Any]:
    """The run's recorded settings (``summary["config"]``), each stopping setting it leaves out
    read from the overrides that launched it (:func:`launch_overrides`); those it records, and
    those no override sets (at their default), as recorded."""
    config = dict(summary["config"])
    if all(key in config for key in stop_defaults()):
        return config
    launched = launch_overrides(run, summary)
    if launched is None:
        return config
    inferred = stop_settings(*launched)
    return {**config, **{k: v for k, v in inferred.items() if k not in config}}
