"""scripts/profile_inception.py: each ATen operation charged to its kind, and a profile of the
three routes whose kinds add up to each route's time."""

import csv
import sys

import pytest

from scripts import profile_inception


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("aten::mkldnn_convolution", "convolution"),
        ("aten::convolution_backward", "convolution"),
        ("aten::native_batch_norm", "batch norm"),
        ("aten::native_batch_norm_backward", "batch norm"),
        ("aten::add", "rest"),
        ("aten::pow", "rest"),
    ],
)
def test_each_operation_is_charged_to_its_kind(op, expected):
    assert profile_inception.kind(op) == expected


@pytest.mark.slow
def test_the_profile_covers_every_route_and_its_kinds_add_up(tmp_path, monkeypatch):
    argv = ["profile_inception", "--steps", "1", "--rounds", "1", "--test-images", "40", "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    profile_inception.main()
    rows = list(csv.DictReader((tmp_path / "inception_profile_cpu.csv").open()))
    kinds = (*profile_inception.KINDS, "rest", profile_inception.OUTSIDE)
    cells = {(r["route"], r["phase"], r["kind"]) for r in rows}
    assert cells == {(route, phase, k) for route in ("study", "stacked", "peer") for phase in ("train", "eval") for k in kinds}  # fmt: skip
    assert {r["seeds_side_by_side"] for r in rows if r["route"] == "stacked"} == {str(profile_inception.COPIES)}  # fmt: skip
    for route in ("study", "stacked", "peer"):
        for phase in ("train", "eval"):
            part = [r for r in rows if (r["route"], r["phase"]) == (route, phase)]
            total = sum(float(r["profiled_ms_per_run_step"]) for r in part)
            assert total == pytest.approx(float(part[0]["ms_per_run_step"]), abs=5e-3)
            conv = next(r for r in part if r["kind"] == "convolution")
            assert float(conv["profiled_ms_per_run_step"]) > 0
