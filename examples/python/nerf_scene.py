#!/usr/bin/env python3
"""Trains a NeRF from Python on a scene folder (NeRF-synthetic transforms_{train,test}.json,
or instant-ngp's transforms.json with --holdout), reports test PSNR / SSIM, renders the
first test camera to a PNG, saves a snapshot and a mesh's size.

    python3 nerf_scene.py SCENE [--seconds 30] [--device cuda] [--out nerf_out]
"""
import argparse
import json
import pathlib
import struct
import zlib

import numpy as np

import tessera
from tessera.nerf import Nerf


def write_png(path, rgb):
    """8-bit RGB PNG from floats in [0, 1] (numpy alone, no imaging library)."""
    img = (np.clip(rgb, 0, 1) * 255 + 0.5).astype(np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in img)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    pathlib.Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", img.shape[1],
                                   img.shape[0], 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) +
                                   chunk(b"IEND", b""))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scene")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--holdout", type=int, default=0)
    p.add_argument("--device", default="cuda" if any(d.startswith("cuda") for d in tessera.devices()) else "cpu")
    p.add_argument("--out", default="nerf_out")
    p.add_argument("--mesh-resolution", type=int, default=256)
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # `tessera nerf train`'s config for this budget (its hash grid widens for long runs).
    nerf = Nerf(args.scene, config=Nerf.default_config(seconds=args.seconds), device=args.device, holdout=args.holdout)
    nerf.train(seconds=args.seconds, callback_every=256,
               callback=lambda s: print(f"step {s['step']}: {s['train_seconds']:.1f} s, loss {s['loss']:.2e}, "
                                        f"{s['steps_per_second']:.0f} steps/s"))
    print("test views:", json.dumps(nerf.evaluate()))
    info = nerf.info()
    test = json.loads((pathlib.Path(args.scene) / "transforms_test.json").read_text()) \
        if (pathlib.Path(args.scene) / "transforms_test.json").exists() else None
    if test:
        rgba = nerf.render(test["frames"][0]["transform_matrix"], info["width"], info["height"],
                           background=(1, 1, 1))
        write_png(out / "test_0.png", rgba[..., :3])
    nerf.save(out / "model.tnerf")
    mesh = nerf.mesh(resolution=args.mesh_resolution)
    print(f"{out / 'model.tnerf'}; mesh: {len(mesh['positions'])} vertices, {len(mesh['triangles'])} triangles")


if __name__ == "__main__":
    main()
