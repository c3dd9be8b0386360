"""Cross-process statistics: 2 CPU processes x 4 examples == 1 process x 8 examples."""

import warnings

import pytest
import torch
import torch.distributed as dist

import bn
from bn.functional import batch_renorm
from tests.processes import free_port, spawn

STEPS = 2


def _layer(kind: str, sync: bool):
    torch.manual_seed(1)
    if kind == "bn":
        layer = bn.BatchNorm2d(3, sync_stats=sync)
    else:
        layer = bn.BatchRenorm2d(3, r_max=3.0, d_max=5.0, sync_stats=sync)
        with torch.no_grad():
            layer.running_mean.uniform_(-0.5, 0.5)
            layer.running_var.uniform_(0.5, 1.5)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 2), layer.bias.uniform_(-1, 1)
    return layer.double()


def _data():
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(8, 3, 4, 4, generator=g, dtype=torch.float64) * 2 + 1 for _ in range(STEPS)]
    gys = [torch.randn(8, 3, 4, 4, generator=g, dtype=torch.float64) for _ in range(STEPS)]
    return xs, gys


def _run(layer, xs, gys):
    outs = []
    for x, gy in zip(xs, gys):
        x = x.clone().requires_grad_(True)
        layer.zero_grad()
        y = layer(x)
        y.backward(gy)
        outs.append(
            {
                "y": y.detach(),
                "gx": x.grad,
                "gw": layer.weight.grad.clone(),
                "gb": layer.bias.grad.clone(),
            }
        )
    return outs, {k: v.clone() for k, v in layer.state_dict().items()}


def _worker(rank: int, port: int, kind: str, out_dir: str, split: int = 4) -> None:
    """Rank 0 takes the first ``split`` of the 8 examples, rank 1 the rest."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        xs, gys = _data()
        sl = slice(0, split) if rank == 0 else slice(split, 8)
        with warnings.catch_warnings():
            # torch.distributed.nn's differentiable collectives are deprecated (FutureWarning)
            warnings.simplefilter("error", FutureWarning)
            warnings.simplefilter("error", DeprecationWarning)
            result = _run(_layer(kind, sync=True), [x[sl] for x in xs], [g[sl] for g in gys])
        torch.save(result, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("split", [4, 8], ids=["halves", "empty-shard"])
@pytest.mark.parametrize("kind", ["bn", "brn"])
def test_two_processes_equal_one(kind, split, tmp_path):
    """With ``split=8`` rank 1's batch is empty (a last shard): it must still take part in the
    collectives (else rank 0 hangs) and every rank must end with the same statistics."""
    spawn(_worker, (free_port(), kind, str(tmp_path), split))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    xs, gys = _data()
    single, single_state = _run(_layer(kind, sync=False), xs, gys)
    for step, want in enumerate(single):
        got = [r[0][step] for r in ranks]
        torch.testing.assert_close(torch.cat([g["y"] for g in got]), want["y"])
        torch.testing.assert_close(torch.cat([g["gx"] for g in got]), want["gx"])
        # Parameter gradients are per process; DDP sums (averages) them across processes.
        torch.testing.assert_close(got[0]["gw"] + got[1]["gw"], want["gw"])
        torch.testing.assert_close(got[0]["gb"] + got[1]["gb"], want["gb"])
    for _, state in ranks:
        for k, v in single_state.items():
            torch.testing.assert_close(state[k], v)
    if kind == "brn":  # and equal to Batch Renorm's Algorithm 1, bn.functional.batch_renorm
        layer = _layer(kind, sync=False)
        mean, var = layer.running_mean.clone(), layer.running_var.clone()
        for step, (x, gy) in enumerate(zip(xs, gys)):
            x = x.clone().requires_grad_(True)
            w, b = (p.detach().clone().requires_grad_(True) for p in (layer.weight, layer.bias))
            y = batch_renorm(x, mean, var, w, b, r_max=3.0, d_max=5.0, momentum=0.01)
            gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)
            got = [r[0][step] for r in ranks]
            torch.testing.assert_close(torch.cat([g["y"] for g in got]), y)
            torch.testing.assert_close(torch.cat([g["gx"] for g in got]), gx)
            torch.testing.assert_close(got[0]["gw"] + got[1]["gw"], gw)
            torch.testing.assert_close(got[0]["gb"] + got[1]["gb"], gb)
        for _, state in ranks:
            torch.testing.assert_close(state["running_mean"], mean)
            torch.testing.assert_close(state["running_var"], var)


def test_sync_without_process_group_is_local():
    a, b = _layer("bn", sync=True), _layer("bn", sync=False)
    x = torch.randn(8, 3, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(a(x), b(x))


VARIANTS = [
    (bn.BatchNorm2d, {"affine": False}),
    (bn.BatchRenorm2d, {"affine": False, "r_max": 1.5, "d_max": 0.5}),
    (bn.BatchRenorm2d, {"bias": False, "r_max": 1.5, "d_max": 0.5}),
]


def _variant(i: int, sync: bool):
    cls, options = VARIANTS[i]
    layer = cls(3, sync_stats=sync, **options).double()
    with torch.no_grad():
        layer.running_mean.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(i))
        if layer.weight is not None:
            layer.weight.uniform_(0.5, 2, generator=torch.Generator().manual_seed(i))
    return layer


def _run_variant(layer, xs, gys):
    outs = []
    for x, gy in zip(xs, gys):
        x = x.clone().requires_grad_(True)
        layer.zero_grad()
        y = layer(x)
        y.backward(gy)
        grads = [p.grad.clone() for p in layer.parameters()]
        outs.append((y.detach(), x.grad, grads, layer.running_var.clone()))
    return outs


def _variants_worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        xs, gys = _data()
        sl = slice(4 * rank, 4 * rank + 4)
        results = [
            _run_variant(_variant(i, sync=True), [x[sl] for x in xs], [g[sl] for g in gys])
            for i in range(len(VARIANTS))
        ]
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_equal_one_without_affine_or_bias(tmp_path):
    spawn(_variants_worker, (free_port(), str(tmp_path)))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    xs, gys = _data()
    for i in range(len(VARIANTS)):
        single = _run_variant(_variant(i, sync=False), xs, gys)
        for step, (y, gx, grads, running_var) in enumerate(single):
            got = [r[i][step] for r in ranks]
            torch.testing.assert_close(torch.cat([g[0] for g in got]), y)
            torch.testing.assert_close(torch.cat([g[1] for g in got]), gx)
            for k, want in enumerate(grads):
                torch.testing.assert_close(got[0][2][k] + got[1][2][k], want)
            for g in got:
                torch.testing.assert_close(g[3], running_var)


def _double_backward_worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        layer = _layer("brn", sync=True)
        x = _data()[0][0][4 * rank : 4 * rank + 4].clone().requires_grad_(True)
        torch.autograd.grad(layer(x).square().sum(), x)  # once: fine
        try:
            torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
            message = ""
        except NotImplementedError as e:
            message = str(e)
        torch.save(message, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_second_derivatives_through_sync_stats_are_a_clear_error(tmp_path):
    """torch's SyncBatchNorm has no double backward either; ours says so instead of computing
    a wrong one."""
    spawn(_double_backward_worker, (free_port(), str(tmp_path)))
    for r in range(2):
        message = torch.load(tmp_path / f"rank{r}.pt")
        assert "second derivatives through sync_stats=True are not supported" in message


def _one_value_worker(rank: int, port: int, out_dir: str) -> None:
    """Rank 0 holds one example of 3 channels, rank 1 none: one value per channel in all."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        layer = bn.BatchNorm1d(3, sync_stats=True).double()
        try:
            layer(torch.randn(1 - rank, 3, dtype=torch.float64))
            message = ""
        except ValueError as e:
            message = str(e)
        torch.save(message, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_one_value_per_channel_over_all_processes_is_an_error(tmp_path):
    """Its variance is undefined whichever process holds the value: every process refuses it
    (none goes on to a collective the others skip)."""
    spawn(_one_value_worker, (free_port(), str(tmp_path)), timeout=120)
    for r in range(2):
        message = torch.load(tmp_path / f"rank{r}.pt")
        assert "the batches of all processes together hold one value per channel" in message


def _module_db_layers(torch_cls, args: dict, sync: bool):
    """BN and Batch Renorm (``r_max=1, d_max=0``) built from a torch ``ModuleInput``'s arguments."""
    from tests.bn.test_module_db import IDENTITY, OURS

    layers = {"bn": OURS[torch_cls][0](**args, sync_stats=sync)}
    if args["track_running_stats"]:  # Batch Renorm refuses to do without
        layers["brn"] = OURS[torch_cls][1](**args, **IDENTITY, sync_stats=sync)
    return layers


def _module_db_cases():
    """torch's BatchNorm ``ModuleInfo`` inputs in float64 training mode: (class, arguments, x)."""
    from tests.bn.test_module_db import INFOS, _inputs, _torch_arguments

    torch.manual_seed(3)
    for torch_cls in INFOS:
        for module_input in _inputs(torch_cls):
            x = module_input.forward_input.args[0].detach()
            args = _torch_arguments(torch_cls, module_input) | {"dtype": torch.float64}
            yield torch_cls, args, x


def _module_db_step(layer, x):
    x = x.clone().requires_grad_(True)
    y = layer(x)
    dy = torch.sin(3 * x.detach())  # an upstream gradient that splits with the batch
    params = list(layer.parameters())
    grads = torch.autograd.grad(y, [x, *params], dy) if y.requires_grad else [x * 0]
    return y.detach(), list(grads), {k: b.clone() for k, b in layer.named_buffers()}


def _module_db_worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        results = []
        for torch_cls, args, x in _module_db_cases():
            half = x.shape[0] // 2
            mine = x[:half] if rank == 0 else x[half:]
            for name, layer in _module_db_layers(torch_cls, args, sync=True).items():
                results.append((name, _module_db_step(layer, mine)))
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_torch_module_inputs_over_two_processes(tmp_path):
    """torch's BatchNorm test inputs (tests/bn/test_module_db.py), each batch split over two
    processes with ``sync_stats=True`` (the empty batch: both shards empty), equal one process
    with the whole batch: outputs, input gradients, parameter gradients summed over the
    processes (as DDP sums them), and the running statistics on every process."""
    spawn(_module_db_worker, (free_port(), str(tmp_path)))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    expected = [
        (name, _module_db_step(layer, x))
        for torch_cls, args, x in _module_db_cases()
        for name, layer in _module_db_layers(torch_cls, args, sync=False).items()
    ]
    assert len(expected) == len(ranks[0]) == len(ranks[1]) > 30
    for (name, (y, grads, buffers)), (_, a), (_, b) in zip(expected, *ranks, strict=True):
        torch.testing.assert_close(torch.cat([a[0], b[0]]), y, msg=name)
        torch.testing.assert_close(torch.cat([a[1][0], b[1][0]]), grads[0], msg=name)
        for k, g in enumerate(grads[1:], start=1):
            torch.testing.assert_close(a[1][k] + b[1][k], g, msg=name)
        for shard in (a, b):
            assert shard[2].keys() == buffers.keys()
            for key, value in buffers.items():
                torch.testing.assert_close(shard[2][key], value, msg=f"{name} {key}")
