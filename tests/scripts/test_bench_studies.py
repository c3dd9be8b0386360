"""scripts.bench_studies and its plain-PyTorch peers (scripts/peers)."""

import ast
import csv
import math
import sys
from pathlib import Path

import pytest
import torch

import bn
from experiments.nets.bn_inception import BNInception, count_parameters
from experiments.nets.convnet import SmallConvNet
from experiments.nets.deep_mlp import DeepMLP
from experiments.nets.mlp import SigmoidMLP
from scripts import bench_layers, bench_studies
from scripts.peers import convnet, deep_mlp, inception, mlp
from tests.configs import compose_config

PEERS = Path(bench_studies.__file__).parent / "peers"


def test_the_peers_import_nothing_from_this_repository_but_their_loop():
    for path in PEERS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] in ("__future__", "torch", "collections") or (
                    node.module == "scripts.peers._train"
                ), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert all(
                    a.name.split(".")[0] in ("torch", "argparse", "time") for a in node.names
                )


@pytest.mark.parametrize(
    "peer,study",
    [
        (mlp.network(True), SigmoidMLP(bn.get_norm_layer("batchnorm", dims=1))),
        (mlp.network(False), SigmoidMLP()),
        (convnet.network(True), SmallConvNet(widths=(16, 32, 64), hidden=128)),
        (deep_mlp.network(8, True), DeepMLP(8, norm_layer=lambda c: torch.nn.BatchNorm1d(c))),
        (
            inception.network(),
            BNInception(10, width=0.125, stem_stride=2, in_channels=3),
        ),
    ],
)
def test_each_peer_is_the_studys_network(peer, study):
    assert count_parameters(peer) == count_parameters(study)
    shapes = sorted(tuple(p.shape) for p in peer.parameters())
    theirs = sorted(tuple(p.shape[1:] if p.dim() == 3 else p.shape) for p in study.parameters())
    if not isinstance(study, SigmoidMLP):  # the stacked MLP stores (copies, out, in) and (in, out)
        assert shapes == theirs


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_the_inception_peer_computes_the_studys_bn_baseline(mode):
    """The same weights give the same outputs: BN before every ReLU, the stem's two LRN layers
    and dropout 0.4 (the same mask from the same seed) included."""
    torch.manual_seed(0)
    norm = bn.get_norm_layer("batchnorm", momentum=0.01, eps=1e-3)
    study = BNInception(10, norm, width=0.125, stem_stride=2, lrn=True, dropout=0.4)
    peer = inception.network()
    with torch.no_grad():
        for mine, theirs in zip(peer.parameters(), study.parameters(), strict=True):
            mine.copy_(theirs)
    x = torch.randn(4, 3, 32, 32)
    outputs = []
    for net in (peer, study):
        torch.manual_seed(1)
        outputs.append(net.train(mode == "train")(x))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)


def _tiny_data(path: Path, shape: tuple[int, ...]) -> Path:
    g = torch.Generator().manual_seed(0)
    data = {
        "x_train": torch.rand(64, *shape, generator=g), "y_train": torch.randint(0, 10, (64,), generator=g),
        "x_test": torch.rand(20, *shape, generator=g), "y_test": torch.randint(0, 10, (20,), generator=g),
    }  # fmt: skip
    torch.save(data, path)
    return path


@pytest.mark.parametrize(
    "peer,shape",
    [(mlp, (784,)), (convnet, (1, 28, 28)), (inception, (3, 32, 32)), (deep_mlp, (784,))],
)
def test_each_peer_trains(tmp_path, monkeypatch, capsys, peer, shape):
    data = _tiny_data(tmp_path / "d.pt", shape)
    argv = ["peer", "--data", str(data), "--steps", "3", "--eval-every", "2", "--batch-size", "8"]
    monkeypatch.setattr(sys, "argv", argv)
    peer.main()
    out = capsys.readouterr().out
    assert "after 3 steps" in out or "for 3 steps each" in out
    if peer is not deep_mlp:  # the peers of the shared loop time it as the bench reads it
        assert bench_studies.loop_seconds("peer", tmp_path, out, 3) > 0


@pytest.mark.slow
def test_the_floor_counts_the_mlps_arithmetic():
    pixels = torch.zeros(10, 784, dtype=torch.uint8)
    pixels[:, :100] = 1  # 100 set pixels an image
    floor = bench_studies.mlp_floor(pixels)
    binary = 2 * 60 * 100 * 100
    dense = 6 * 2 * 60 * 100 * 100
    output, elementwise = 3 * 2 * 60 * 100 * 10, 3 * 60 * 100 * 20
    evaluation = 10_000 * (100 * 100 + 4 * 100 * 100 + 2 * 100 * 10) / 500
    expected = (binary + dense + output + elementwise + evaluation) / 1e6
    assert floor["mflop"] == pytest.approx(expected)
    assert floor["ms_own"] == pytest.approx(floor["mflop"] / floor["gflops_own_shapes"])
    assert floor["gflops_own_shapes"] > 0 and floor["gflops_large"] > 0
    # the floor takes the faster route, ATen's products or the fused step's kernel (where built)
    assert floor["gflops_own_shapes"] == max(floor["rates_own"].values())
    assert floor["gflops_large"] == max(floor["rates_large"].values())
    assert "aten" in floor["rates_own"] and "aten" in floor["rates_large"]


@pytest.mark.slow
def test_every_case_names_a_setup_of_its_study():
    for case in bench_studies.cases():
        study = case.study[0].split(".")[1]
        cfg = compose_config(study, [o.replace("'", "") for o in case.study[1:]])
        assert cfg.data.name == "mnist" and cfg.threads == 1


def test_timing_some_cases_keeps_the_other_rows(tmp_path):
    path = tmp_path / "studies_cpu.csv"
    path.write_text("key,ratio_peer_to_study\nmlp,3.0\nconv,1.3\n")
    rows = bench_studies._merged(path, [{"key": "mlp", "ratio_peer_to_study": "4.5"}])
    assert [(r["key"], r["ratio_peer_to_study"]) for r in rows] == [("mlp", "4.5"), ("conv", "1.3")]
    assert bench_studies._merged(tmp_path / "missing.csv", rows[:1]) == rows[:1]
    # a row kept from before the 'timed' column was timed as whole runs: it says so
    fresh = [{"key": "mlp", "ratio_peer_to_study": "4.5", "timed": bench_studies.TIMED[True]}]
    kept = {r["key"]: r for r in bench_studies._merged(path, fresh)}
    assert kept["conv"]["timed"] == bench_studies.TIMED[False]


def test_a_ratio_is_decided_on_the_interval_of_its_rounds():
    # log10 ratios 0, a, 2a: mean a, standard error a / sqrt(3), t(0.975, 2 df) = 4.302653
    a = math.log10(1.1)
    half = 4.302653 * a / math.sqrt(3)
    mean, low, high = bench_studies.ratio_interval([1.0, 1.1, 1.21])
    assert mean == pytest.approx(1.1)
    assert (low, high) == pytest.approx((1.1 / 10**half, 1.1 * 10**half), rel=1e-6)
    assert low < 1.0 < high
    assert bench_studies.decide((mean, low, high), 1.0) == "undecided"
    assert bench_studies.decide((mean, low, high), 0.8) == "met"
    assert bench_studies.decide((mean, low, high), 1.5) == "missed"
    # one round: no interval, so no verdict either way
    assert bench_studies.ratio_interval([1.3]) is None
    assert bench_studies.decide(None, 1.0) == "undecided"
    assert bench_studies.interval_text((mean, low, high)) == "1.10 [0.87, 1.39]"
    # a round whose ratio is not positive (a stall longer than the short run): no interval
    assert bench_studies.ratio_interval([1.1, -0.4, 1.2]) is None
    assert bench_studies.ratio_interval([1.1, float("inf")]) is None


def test_kept_rows_are_judged_from_the_rounds_they_record(tmp_path, capsys):
    path = tmp_path / "studies_cpu.csv"
    path.write_text(
        "key,ratios_by_round,target,ratios_stacked_by_round,stacked_target\n"
        "mlp,4.5 4.6 4.4,4.0,,\n"  # tight above the target: met
        "inception,1.0 1.1 1.21,1.0,1.2 1.21 1.19,1.5\n"  # undecided; stacked missed
        "conv,1.4,,,\n"  # one round, no target: no interval, no verdict
    )
    bench_studies.rejudge(path)
    with path.open(newline="") as f:
        rows = {r["key"]: r for r in csv.DictReader(f)}
    assert rows["mlp"]["target_verdict"] == "met"
    assert rows["inception"]["target_verdict"] == "undecided"
    assert rows["inception"]["stacked_target_verdict"] == "missed"
    assert rows["conv"]["ratio_gm_ci95"] == "" and rows["conv"]["target_verdict"] == ""
    out = capsys.readouterr().out
    assert "targets MISSED: inception, stacked: 1.20 [" in out
    assert "targets UNDECIDED (the interval holds the target): inception: 1.10 [" in out
    # the derived columns follow the recorded ones, as a timed run writes them
    assert list(rows["mlp"])[5:] == [
        "ratio_gm_ci95", "target_verdict", "ratio_stacked_gm_ci95", "stacked_target_verdict",
    ]  # fmt: skip


def test_a_file_without_the_stacked_route_is_judged_on_what_it_records(tmp_path, capsys):
    path = tmp_path / "studies_cpu.csv"
    path.write_text(
        "key,ratios_by_round,target,cpu\n"
        "mlp,4.2,4.0,AMD\n"  # one round: no interval, so the target is undecided
        "deep,0.9 -0.1 1.0,,AMD\n"  # a stalled round and no target: no interval, no verdict
    )
    bench_studies.rejudge(path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["key", "ratios_by_round", "target", "ratio_gm_ci95", "target_verdict", "cpu"]  # fmt: skip
    assert (rows[0]["ratio_gm_ci95"], rows[0]["target_verdict"]) == ("", "undecided")
    assert (rows[1]["ratio_gm_ci95"], rows[1]["target_verdict"]) == ("", "")
    assert "mlp: no interval against 4.0x" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="cannot rejudge"):
        bench_studies.rejudge(tmp_path / "missing.csv")


def test_the_report_names_missed_and_undecided_targets_apart(tmp_path, capsys):
    bench_layers.write_report(tmp_path / "a.csv", [{"key": "x"}], ["x: 0.90 [0.85, 0.95] against 1.0x"], ["y: 1.2 [0.9, 1.6] against 1.5x"])  # fmt: skip
    out = capsys.readouterr().out
    assert (
        "targets MISSED: x:" in out
        and "targets UNDECIDED (the interval holds the target): y:" in out
    )
    assert "targets met" not in out
    bench_layers.write_report(tmp_path / "b.csv", [{"key": "x"}], [], [])
    assert "targets met" in capsys.readouterr().out


@pytest.mark.slow
def test_the_layout_bench_times_both_layouts_and_names_the_faster(tiny_data, tmp_path, monkeypatch):
    from scripts import bench_layout

    argv = ["bench_layout", "--setups", "bn32,brn_micro4", "--seeds", "1,2", "--rounds", "1"]
    argv += ["--steps", "2", "--root", str(tiny_data), "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    bench_layout.main()
    rows = list(csv.DictReader((tmp_path / "conv_layout_cpu.csv").open()))
    cases = {(r["setup"], r["seeds_side_by_side"], r["layout"]) for r in rows}
    assert cases == {(s, k, lay) for s in ("bn32", "brn_micro4") for k in "12" for lay in bench_layout.LAYOUTS}  # fmt: skip
    for setup, k, _ in cases:
        pair = [r for r in rows if (r["setup"], r["seeds_side_by_side"]) == (setup, k)]
        assert all(float(r["train_ms_per_run_step"]) > 0 for r in pair)
        quicker = min(pair, key=lambda r: float(r["total_ms_per_run_step"]))["layout"]
        assert {r["faster"] for r in pair} == {quicker}


def _sides(case):
    """A case's study overrides as ``{key: value}``, and the value its peer gives a flag."""
    peer = case.peer[1:]
    return dict(a.split("=", 1) for a in case.study[1:]), lambda flag: peer[peer.index(flag) + 1]


def test_the_depth_cases_measure_what_the_study_does_at_its_cadence():
    from experiments.studies import DEPTH_LR_RUN, study

    by_key = {c.key: c for c in bench_studies.cases()}
    assert "--ratio" in by_key["depth"].peer  # every step: the ratio on both sides
    case = by_key["depth_lr"]
    study_args, option = _sides(case)
    grid = study("depth_lr").reproductions[0].stages[0][0].args
    assert all(
        a in grid
        for a in case.study[1:]
        if a.split("=")[0] in dict(a.split("=", 1) for a in DEPTH_LR_RUN)
    )
    assert "train.steps" not in study_args  # the bench sets the lengths
    assert option("--eval-every") == study_args["eval.every"]
    assert option("--test-examples") == study_args["eval.test_examples"]
    assert float(option("--lr")) == float(study_args["train.lr"])
    assert str(float(study_args["train.lr"])) in {
        str(float(r)) for r in grid[2].split("=")[1].split(",")
    }
    assert "--ratio" in case.peer and case.lengths[1] - case.lengths[0] == 3 * int(
        study_args["eval.every"]
    )


def test_the_deep_mlp_peer_measures_the_ratio_and_the_test_accuracy(tmp_path, monkeypatch, capsys):
    data = _tiny_data(tmp_path / "d.pt", (784,))
    net = deep_mlp.network(2, True)
    x, y = torch.rand(8, 784), torch.randint(0, 10, (8,))
    loss, ratio = deep_mlp.fixed_batch_measures(net, x, y, ratio=True)
    first, last = torch.autograd.grad(
        torch.nn.functional.cross_entropy(net(x), y), [net[0].weight, net[-1].weight]
    )
    assert ratio == pytest.approx((first.norm() / last.norm()).item())
    assert deep_mlp.fixed_batch_measures(net, x, y, ratio=False) == [pytest.approx(loss)]
    net.eval()
    right = (net(x).argmax(1) == y).float().mean().item()
    net.train()
    assert deep_mlp.test_accuracy(net, x, y, batch=3) == pytest.approx(right) and net.training
    argv = ["peer", "--data", str(data), "--steps", "2", "--eval-every", "1", "--batch-size", "8", "--ratio", "--test-examples", "5"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    deep_mlp.main()
    assert "for 2 steps each" in capsys.readouterr().out


def test_the_inception_case_evaluates_as_figure_3_on_both_sides():
    """Study and peer evaluate as many test and training images as often as Figure 3's
    confirmatory runs; the stacked route fuses the modules' 1x1 reductions."""
    from experiments.studies import FIG3_SCHEDULE

    case = {c.key: c for c in bench_studies.cases()}["inception"]
    study_args, option = _sides(case)
    schedule = dict(a.split("=", 1) for a in FIG3_SCHEDULE)
    for key, flag in [("eval.every", "--eval-every"), ("eval.test_subset", "--test-subset"), ("eval.train_subset", "--train-eval")]:  # fmt: skip
        assert study_args[key] == option(flag) == schedule[key], key
    assert "model.fuse_reductions=true" in case.stacked[0] and case.stacked[1] == 5


def test_a_loop_timed_route_reads_its_loop_not_its_process(tmp_path, capsys):
    """The study's loop time is its summary's steps per second (a stack's runs record the
    stack's), the peer's its printed line, with a warning where its wall time shows the machine
    busy; a run that records neither is one line, not a zero."""
    (tmp_path / "seed1").mkdir()
    (tmp_path / "seed1" / "summary.json").write_text('{"steps_per_s": 2.5, "steps_done": 300}')
    assert bench_studies.loop_seconds("stacked", tmp_path, "", 300) == 120.0
    printed = (
        f"test accuracy 0.5 after 300 steps\n{bench_studies.LOOP_LINE} 36.5 s wall, 36.4 s cpu\n"
    )
    assert bench_studies.loop_seconds("peer", tmp_path, printed, 300) == 36.5
    assert "busy" not in capsys.readouterr().err
    waited = f"{bench_studies.LOOP_LINE} 40.0 s wall, 36.4 s cpu\n"  # a core shared
    assert bench_studies.loop_seconds("peer", tmp_path, waited, 300) == 40.0
    assert "running something else" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="printed no"):
        bench_studies.loop_seconds("peer", tmp_path, "test accuracy 0.5 after 300 steps", 300)
    with pytest.raises(SystemExit, match="no summary.json"):
        bench_studies.loop_seconds("study", tmp_path / "seed2", "", 300)
    # a run that stopped short (diverged) trained fewer steps than the bench divides by
    (tmp_path / "seed1" / "summary.json").write_text('{"steps_per_s": 2.5, "steps_done": 120}')
    with pytest.raises(SystemExit, match="120 steps done of 300"):
        bench_studies.loop_seconds("stacked", tmp_path, "", 300)


def test_only_the_inception_case_is_loop_timed_and_its_row_says_so():
    timed = {c.key: c.loop_timed for c in bench_studies.cases()}
    assert timed.pop("inception") and not any(timed.values())
    case = {c.key: c for c in bench_studies.cases()}["inception"]
    assert case.steps_timed() == case.lengths[1]
    # a loop-timed case runs its longer length alone and divides that run's loop seconds by it;
    # the others run both lengths and divide their seconds' difference by the lengths'
    assert case.run_lengths() == case.lengths[1:] and case.seconds_timed([30.0]) == 30.0
    whole = {c.key: c for c in bench_studies.cases()}["conv"]
    assert whole.run_lengths() == whole.lengths
    assert whole.steps_timed() == whole.lengths[1] - whole.lengths[0]
    assert whole.seconds_timed([4.0, 10.0]) == 6.0
