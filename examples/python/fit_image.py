#!/usr/bin/env python3
"""Fits a 2-D image with a hash grid + fully fused MLP from PyTorch: tessera.torch used as
tinycudann is (same constructors, configs and `params`), trained with torch's Adam or with
tessera's fused trainer (--fused). Runs on a GPU when there is one, else on the CPU.

    python3 fit_image.py [--steps 1000] [--device cuda|cpu] [--fused] [--min-psnr DB]
"""
import argparse
import math
import sys
import time

import torch

import tessera.torch as tcnn


def image(xy):
    """A procedural RGB image on [0, 1]^2 with edges, rings and fine stripes."""
    u, v = xy[:, :1], xy[:, 1:]
    r = 0.5 + 0.5 * torch.sin(40 * ((u - 0.5) ** 2 + (v - 0.5) ** 2))
    g = ((torch.floor(u * 8) + torch.floor(v * 8)) % 2) * 0.8 + 0.1
    b = 0.5 + 0.5 * torch.cos(25 * u + 10 * v)
    return torch.cat([r, g, b], dim=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=1 << 16)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--fused", action="store_true", help="tessera's fused step (forward, loss, backward, Adam)")
    p.add_argument("--min-psnr", type=float, default=0.0, help="exit 1 below this PSNR")
    args = p.parse_args()
    device = torch.device(args.device)

    model = tcnn.NetworkWithInputEncoding(
        n_input_dims=2, n_output_dims=3,
        encoding_config={"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2,
                         "log2_hashmap_size": 15, "base_resolution": 16, "per_level_scale": 1.5},
        network_config={"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                        "n_neurons": 64, "n_hidden_layers": 2},
    ).to(device)
    if args.fused:
        trainer = tcnn.Trainer(model, loss={"otype": "L2"}, optimizer={"otype": "Adam", "learning_rate": 1e-2})
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)

    start = time.perf_counter()
    for step in range(args.steps):
        x = torch.rand(args.batch, 2, device=device)
        if args.fused:
            trainer.step(x, image(x))
        else:
            loss = ((model(x) - image(x)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start

    with torch.no_grad():
        x = torch.rand(1 << 16, 2, generator=torch.Generator().manual_seed(0)).to(device)
        psnr = -10 * math.log10(((model(x) - image(x)) ** 2).mean().item())
    print(f"{args.steps} steps on {device} in {seconds:.2f} s ({args.steps / seconds:.0f} steps/s): PSNR {psnr:.2f} dB")
    return 0 if psnr >= args.min_psnr else 1


if __name__ == "__main__":
    sys.exit(main())
