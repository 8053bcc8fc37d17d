#!/usr/bin/env python3
"""A training step with an eikonal term from Python (GPU host): the same model (hash grid
T2^19 + MLP w64 h2, one output, batch 2^18, as `tessera bench eikonal`) in plain PyTorch
(bench/python_step.py's hash grid written in torch, nn.Linear MLP; autocast fp16 as the
plain step there) and as tessera modules through tessera.torch, each with the plain step
(L1 on the distance) and the step with the eikonal term:

    g = dy/dx (create_graph=True);  loss = L1(y, d) + w * mean((|g| - 1)^2);  backward; Adam

Times are device events around loops of steps, median of several loops after a warm-up.

    python3 bench/python_eikonal.py [--device cuda] [--json OUT.json]
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_step import TorchHashGrid, cuda_bench_args, timed_loops  # noqa: E402

import tessera.torch as tcnn  # noqa: E402

ENCODING = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
            "base_resolution": 16, "per_level_scale": 1.3819}
NETWORK = {"otype": "FullyFusedMLP", "n_neurons": 64, "n_hidden_layers": 2, "activation": "ReLU",
           "output_activation": "None"}
WEIGHT = 0.1


class IndexSelectHashGrid(TorchHashGrid):
    """The same grid written for double backward: the table read with index_select (backward
    index_add_, double backward index_select again) instead of advanced indexing, and the
    corner weights as explicit products instead of prod() (whose double backward takes a
    slow path for inputs that may hold zeros)."""

    def corner_weights(self, per_dim):
        w = per_dim[..., 0]
        for d in range(1, per_dim.shape[-1]):
            w = w * per_dim[..., d]
        return w

    def lookup(self, idx):
        return self.table.index_select(0, idx.reshape(-1)).view(*idx.shape, -1)


def torch_model(device, grid_class):
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.ReLU(),
                              torch.nn.Linear(64, 64, bias=False), torch.nn.ReLU(),
                              torch.nn.Linear(64, 1, bias=False))
    return torch.nn.Sequential(grid_class(3, ENCODING), mlp).to(device)


def make_step(model, data, eikonal, autocast):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)

    def step():
        x, d = data()
        x = x.requires_grad_(eikonal)
        with torch.autocast("cuda", dtype=torch.float16, enabled=autocast):
            y = model(x).float()
            loss = (y - d).abs().mean()
            if eikonal:
                (g,) = torch.autograd.grad(y, x, torch.ones_like(y), create_graph=True)
                loss = loss + WEIGHT * ((g.float().norm(dim=1) - 1) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main():
    args, device = cuda_bench_args(__doc__, "python_eikonal.py")
    batch = 1 << args.log2_batch
    gen = torch.Generator(device=device).manual_seed(3)
    xs = [torch.rand(batch, 3, device=device, generator=gen) for _ in range(3)]
    ds = [((x - 0.5).norm(dim=1, keepdim=True) - 0.3) for x in xs]  # a sphere's distance
    k = [0]

    def data():
        k[0] += 1
        return xs[k[0] % 3].detach().clone(), ds[k[0] % 3]

    results = {"batch": batch, "weight": WEIGHT}
    for eikonal in (False, True):
        name = "eikonal" if eikonal else "plain"
        model = tcnn.NetworkWithInputEncoding(3, 1, ENCODING, NETWORK, device=device)
        results[f"tessera_torch_{name}_ms"] = timed_loops(make_step(model, data, eikonal, False), device)
        for label, grid_class in (("pytorch", TorchHashGrid), ("pytorch_index_select", IndexSelectHashGrid)):
            results[f"{label}_{name}_ms"] = timed_loops(make_step(torch_model(device, grid_class), data, eikonal, True),
                                                        device, steps_per_loop=5, loops=5, warmup=2)
    print(f"eikonal step, hash grid T2^19 + w64 h2, batch {batch} on {torch.cuda.get_device_name(device)} "
          f"(torch {torch.__version__}), ms/step:")
    print(f"{'':<26} {'plain':>9} {'eikonal':>9} {'ratio':>7}")
    for label, key in (("tessera via tessera.torch", "tessera_torch"), ("plain PyTorch autograd", "pytorch"),
                       ("  grid for double backward", "pytorch_index_select")):
        plain, eik = results[f"{key}_plain_ms"], results[f"{key}_eikonal_ms"]
        print(f"{label:<26} {plain:>9.3f} {eik:>9.3f} {eik / plain:>7.2f}")
    best = min(results["pytorch_eikonal_ms"], results["pytorch_index_select_eikonal_ms"])
    print(f"eikonal step: tessera.torch {best / results['tessera_torch_eikonal_ms']:.1f}x faster than plain PyTorch's "
          "faster grid")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, **results}, f, indent=1)


if __name__ == "__main__":
    main()
