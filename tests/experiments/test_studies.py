"""experiments/studies.py, the study registry: light (no torch), and in step with the study
modules, their debug configs and the figures on disk."""

import subprocess
import sys
from pathlib import Path

from experiments.studies import SECTIONS, STUDIES, TRAINING, study
from tests.imports import imported_modules

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(  # the Hydra entry points: a module that registers its config schema
    p.stem for p in (REPO / "experiments").glob("*.py") if "config.register(" in p.read_text()
)


def test_the_registry_imports_without_torch():
    code = "import sys, experiments.studies; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


def test_every_study_module_is_registered_with_its_config_folder():
    assert MODULES, "no study modules found"
    assert sorted(TRAINING) == MODULES
    for name in MODULES:
        assert study(name).sections, name
        folder = REPO / "configs" / name
        assert (folder / "debug" / "quick.yaml").exists(), name
        assert "- debug: null" in (folder / f"{name}.yaml").read_text(), name


def test_collection_reads_the_registry_without_torch():
    code = "import sys, scripts.collect; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


def test_sections_are_unique_and_the_figures_of_committed_results_are_drawn():
    """A section whose results are committed has its figures drawn; one without results (a study
    just registered) is "no result" in the claims table and the report, and draws nothing yet.
    No figure is drawn that no section names."""
    anchors = [s.anchor for st in STUDIES for s in st.sections]
    assert len(anchors) == len(set(anchors)) == len(SECTIONS)
    drawn = {p.name for p in (REPO / "results" / "figures").glob("*.png")}
    committed = [s for s in SECTIONS.values() if (REPO / "results" / s.path).exists()]
    assert committed
    assert {f.file for s in committed for f in s.figures} <= drawn
    assert drawn <= {f.file for s in SECTIONS.values() for f in s.figures}


def test_every_style_and_label_names_a_setup_of_its_study():
    """A setup renamed in configs/<study>/setup/ must be renamed in the registry too: a style or
    label for a setup that no longer exists would leave the new one unstyled."""
    from experiments.kit.config import setups

    for st in STUDIES:
        if st.trains and (st.styles or st.labels):
            own = set(setups(st.name))
            assert set(st.styles) <= own, (st.name, set(st.styles) - own)
            assert set(st.labels) <= own, (st.name, set(st.labels) - own)
        for setup, style in st.styles.items():
            assert style.color.startswith("#") and st.legend(setup), (st.name, setup)


def _imports(study: str) -> set[str]:
    """The modules ``experiments/<study>.py`` imports."""
    return imported_modules(REPO / "experiments" / f"{study}.py")


def test_no_study_imports_another():
    """A study depends on the kit, the nets and bn, never on another study's module."""
    for name in TRAINING:
        imported = _imports(name)
        others = {f"experiments.{s}" for s in TRAINING if s != name}
        assert not imported & others, (name, imported & others)


def test_a_study_names_its_results_hook_and_does_not_import_it():
    """The analysis a study's collection adds (its record's ``extend``) is imported by the
    collector alone: training a study loads none of it."""
    hooked = 0
    for name in TRAINING:
        record = study(name)
        if record.extend is None:
            continue
        hooked += 1
        module = record.extend.partition(":")[0]
        assert callable(record.extend_hook()), record.extend
        assert module not in _imports(name), (name, module)
    assert hooked >= 2  # inception's Figure 3 and mechanism's results


def test_a_study_s_collection_order_and_styles_name_its_setups():
    """A collection lists each setup once, and ``reproduce-all`` runs the everyday
    reproductions (not the confirmatory ones, nor those that need settings or GPUs)."""
    from experiments.studies import REPRODUCTIONS

    for st in STUDIES:
        assert len(set(st.setups)) == len(st.setups), st.name
    everyday = set(REPRODUCTIONS["reproduce-all"].members)
    assert {"reproduce-mnist", "reproduce-renorm", "reproduce-questions"} <= everyday
    assert not {r for r in everyday if REPRODUCTIONS[r].seeds or REPRODUCTIONS[r].requires}
