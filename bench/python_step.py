#!/usr/bin/env python3
"""Training-step time from Python (GPU host): tessera's fused Trainer, torch's Adam over a
tessera module's `params`, and the same model in plain PyTorch (nn.Linear MLP and a hash
grid written in torch), for `tessera bench mlp`'s in32 w64 h2 case and `bench encoding`'s
3-D case; then the per-call overhead (an empty batch). Times are device events around a
loop of steps (host overhead included: the GPU waits whenever Python is slower), median of
several loops after a warm-up.

    python3 bench/python_step.py [--device cuda] [--json OUT.json]
"""
import argparse
import json
import statistics
import sys
import time

import torch

import tessera.torch as tcnn

CASES = {
    "in32 w64 h2 out16": dict(n_in=32, n_out=16, encoding=None, lr=1e-3,
                              network={"otype": "FullyFusedMLP", "n_neurons": 64, "n_hidden_layers": 2,
                                       "activation": "ReLU", "output_activation": "None"}),
    "HashGrid3D T2^19 + w64 h1 out16": dict(
        n_in=3, n_out=16, lr=1e-2,
        encoding={"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
                  "base_resolution": 16, "per_level_scale": 2.0},
        network={"otype": "FullyFusedMLP", "n_neurons": 64, "n_hidden_layers": 1, "activation": "ReLU",
                 "output_activation": "None"}),
}
PRIMES = (1, 2654435761, 805459861)


class TorchHashGrid(torch.nn.Module):
    """A multiresolution hash grid in plain PyTorch ops (linear interpolation, tessera's layout)."""

    def __init__(self, n_dims, config):
        super().__init__()
        import numpy as np
        levels, offset = [], 0
        for level in range(config["n_levels"]):
            scale = float(np.float32(np.exp2(np.float32(level) * np.log2(np.float32(config["per_level_scale"])))) *
                          np.float32(config["base_resolution"]) - np.float32(1.0))
            res = int(np.ceil(scale)) + 1
            size = min((res ** n_dims + 7) // 8 * 8, 1 << config["log2_hashmap_size"])
            levels.append((scale, res, size, offset, res ** n_dims <= size))
            offset += size
        self.levels, self.n_dims = levels, n_dims
        self.table = torch.nn.Parameter(torch.empty(offset, config["n_features_per_level"]).uniform_(-1e-4, 1e-4))
        corners = torch.tensor([[(c >> d) & 1 for d in range(n_dims)] for c in range(1 << n_dims)])
        self.register_buffer("corners", corners)

    def forward(self, x):
        out = []
        for scale, res, size, offset, dense in self.levels:
            pos = x * scale + 0.5
            cell = torch.floor(pos)
            frac = pos - cell
            vertex = cell.long()[:, None, :] + self.corners[None]  # [B, 2^d, d]
            w = self.corner_weights(torch.where(self.corners[None].bool(), frac[:, None, :], 1 - frac[:, None, :]))
            if dense:
                idx = vertex[..., 0] + vertex[..., 1] * res + vertex[..., 2] * res * res
            else:
                idx = (vertex[..., 0] * PRIMES[0]) ^ (vertex[..., 1] * PRIMES[1]) ^ (vertex[..., 2] * PRIMES[2])
            out.append((w[..., None] * self.lookup(offset + idx % size)).sum(1))
        return torch.cat(out, dim=1)

    def corner_weights(self, per_dim):
        """[B, 2^d] from each corner's per-dimension weights [B, 2^d, d]."""
        return per_dim.prod(-1)

    def lookup(self, idx):
        """The table rows at idx [B, 2^d]: [B, 2^d, F]."""
        return self.table[idx]


def torch_model(case, device):
    layers, width = [], case["network"]["n_neurons"]
    n_in = case["n_in"] if case["encoding"] is None else 32
    dims = [n_in] + [width] * case["network"]["n_hidden_layers"] + [case["n_out"]]
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1], bias=False))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    mlp = torch.nn.Sequential(*layers)
    if case["encoding"] is None:
        return mlp.to(device)
    return torch.nn.Sequential(TorchHashGrid(case["n_in"], case["encoding"]), mlp).to(device)


def timed_loops(step, device, steps_per_loop=50, loops=7, warmup=20):
    for _ in range(warmup):
        step()
    ms = []
    for _ in range(loops):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        for _ in range(steps_per_loop):
            step()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / steps_per_loop)
    return statistics.median(ms)


def bench_case(name, case, device, batch):
    gen = torch.Generator(device=device).manual_seed(3)
    xs = [torch.rand(batch, case["n_in"], device=device, generator=gen) for _ in range(3)]
    ys = [torch.rand(batch, case["n_out"], device=device, generator=gen) for _ in range(3)]
    k = [0]

    def data():
        k[0] += 1
        return xs[k[0] % 3], ys[k[0] % 3]

    def make():
        if case["encoding"] is None:
            return tcnn.Network(case["n_in"], case["n_out"], case["network"], device=device)
        return tcnn.NetworkWithInputEncoding(case["n_in"], case["n_out"], case["encoding"], case["network"],
                                             device=device)

    result = {"case": name, "batch": batch}
    model = make()
    trainer = tcnn.Trainer(model, loss={"otype": "L2"},
                           optimizer={"otype": "Adam", "learning_rate": case["lr"], "epsilon": 1e-15})
    result["fused_trainer_ms"] = timed_loops(lambda: trainer.step(*data()), device)

    for label, kwargs in (("torch_adam_ms", {}), ("torch_fused_adam_ms", {"fused": True})):
        model = make()
        opt = torch.optim.Adam(model.parameters(), lr=case["lr"], betas=(0.9, 0.99), eps=1e-15, **kwargs)

        def torch_adam_step():
            x, y = data()
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        result[label] = timed_loops(torch_adam_step, device)

    plain = torch_model(case, device)
    opt = torch.optim.Adam(plain.parameters(), lr=case["lr"], betas=(0.9, 0.99), eps=1e-15, fused=True)

    def plain_step():
        x, y = data()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = ((plain(x).float() - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    result["plain_pytorch_ms"] = timed_loops(plain_step, device, steps_per_loop=10, loops=5, warmup=3)
    return result


def call_overhead(device):
    """Microseconds per call from Python with nothing to compute: an empty batch's forward."""
    net = tcnn.Network(32, 16, CASES["in32 w64 h2 out16"]["network"], device=device)
    x = torch.empty(0, 32, device=device)
    with torch.no_grad():
        for _ in range(100):
            net(x)
        start = time.perf_counter()
        for _ in range(2000):
            net(x)
        inference_us = (time.perf_counter() - start) / 2000 * 1e6
    x = torch.rand(128, 32, device=device, requires_grad=True)
    for _ in range(100):
        net(x).sum().backward()
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(1000):
        net(x).sum().backward()
    torch.cuda.synchronize(device)
    autograd_us = (time.perf_counter() - start) / 1000 * 1e6
    return {"empty_batch_inference_us": inference_us, "batch128_forward_backward_us": autograd_us}


def cuda_bench_args(description, script):
    """--device (a CUDA device), --log2-batch, --json: the Python benchmarks' command line."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--log2-batch", type=int, default=18)
    p.add_argument("--json")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type != "cuda":
        sys.exit(f"{script} times CUDA steps (device events); give --device cuda[:N]")
    return args, device


def main():
    args, device = cuda_bench_args(__doc__, "python_step.py")
    results = [bench_case(name, case, device, 1 << args.log2_batch) for name, case in CASES.items()]
    overhead = call_overhead(device)
    print(f"{'case':<34} {'fused Trainer':>14} {'torch Adam':>11} {'fused Adam':>11} {'plain torch':>12}  (ms/step)")
    for r in results:
        print(f"{r['case']:<34} {r['fused_trainer_ms']:>14.3f} {r['torch_adam_ms']:>11.3f} "
              f"{r['torch_fused_adam_ms']:>11.3f} {r['plain_pytorch_ms']:>12.3f}")
    print(f"per call: {overhead['empty_batch_inference_us']:.1f} us (empty batch inference), "
          f"{overhead['batch128_forward_backward_us']:.1f} us (batch 128 forward + backward through autograd)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "cases": results,
                       "overhead": overhead}, f, indent=1)


if __name__ == "__main__":
    main()
