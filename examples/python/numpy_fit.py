#!/usr/bin/env python3
"""Fits a 2-D function with tessera's numpy trainer (no PyTorch needed): a hash grid + fully
fused MLP from a tiny-cuda-nn config, trained on host arrays, then saved and resumed.

    python3 numpy_fit.py [--device cpu|cuda] [--steps 500]
"""
import argparse
import tempfile

import numpy as np

import tessera

CONFIG = {
    "encoding": {"otype": "HashGrid", "n_levels": 12, "n_features_per_level": 2, "log2_hashmap_size": 15,
                 "base_resolution": 4, "per_level_scale": 1.5},
    "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
                "n_hidden_layers": 2},
    "loss": {"otype": "L2"},
    "optimizer": {"otype": "Adam", "learning_rate": 1e-2},
}


def f(x):
    return np.sin(8 * x[:, :1]) * np.cos(6 * x[:, 1:]) + 0.3 * x[:, :1] ** 2


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if any(d.startswith("cuda") for d in tessera.devices()) else "cpu")
    p.add_argument("--steps", type=int, default=500)
    args = p.parse_args()
    trainer = tessera.Trainer.from_config(CONFIG, n_input_dims=2, n_output_dims=1, device=args.device)
    rng = np.random.default_rng(0)
    for step in range(1, args.steps + 1):
        x = rng.random((16384, 2), dtype=np.float32)
        loss = trainer.training_step(x, f(x))
        if step % 100 == 0:
            print(f"step {step}: loss {loss:.2e}")
    test = rng.random((65536, 2))
    print(f"test MSE {np.mean((trainer.inference(test) - f(test)) ** 2):.2e} ({trainer.n_params} parameters on "
          f"{args.device})")
    with tempfile.TemporaryDirectory() as d:
        trainer.save(f"{d}/fit.snapshot")  # the model, Adam's moments and the step count
        trainer.load(f"{d}/fit.snapshot")
    print(f"resumable at step {trainer.steps}")


if __name__ == "__main__":
    main()
