"""The tests' NeRF scene, written from Python: three coloured, diffusely lit spheres seen from
cameras on a spiral around them (tests/support/procedural_scene.h's scene), as a
NeRF-synthetic folder: transforms_{train,test}.json and RGBA PNGs, transparent background."""
import json
import math
import struct
import zlib

import numpy as np

SPHERES = [((0.0, 0.0, 0.0), (0.9, 0.2, 0.15), 0.6),
           ((0.7, 0.3, -0.2), (0.15, 0.7, 0.25), 0.35),
           ((-0.5, -0.6, 0.4), (0.2, 0.35, 0.9), 0.4)]
CAMERA_ANGLE_X = 0.69


def look_at_origin(eye):
    """Camera-to-world [4, 4] (OpenGL camera: columns right, up, back; then the position)."""
    eye = np.asarray(eye, dtype=np.float64)
    f = -eye / np.linalg.norm(eye)
    r = np.cross(f, [0.0, 0.0, 1.0])
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = r, u, -f, eye
    return m


def render_spheres(c2w, size, angle_x=CAMERA_ANGLE_X):
    """RGBA8 [size, size, 4] (sRGB colour, alpha 0 where no sphere is hit)."""
    fl = 0.5 * size / math.tan(0.5 * angle_x)
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    cam = np.stack([(xs - 0.5 * size) / fl, -(ys - 0.5 * size) / fl, -np.ones_like(xs)], axis=-1)
    d = cam @ c2w[:3, :3].T
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    o = c2w[:3, 3]
    best = np.full((size, size), np.inf)
    colour = np.zeros((size, size, 3))
    light = np.array([0.4, 0.5, 0.77])
    for centre, rgb, radius in SPHERES:
        oc = o - np.array(centre)
        b = d @ oc
        disc = b * b - (oc @ oc - radius * radius)
        t = -b - np.sqrt(np.maximum(disc, 0))
        hit = (disc >= 0) & (t > 0) & (t < best)
        n = (o + t[..., None] * d - np.array(centre)) / radius
        lambert = np.maximum(0.0, n @ light)
        shade = np.clip(np.array(rgb) * (0.35 + 0.65 * lambert[..., None]), 0, 1)
        colour = np.where(hit[..., None], shade, colour)
        best = np.where(hit, t, best)
    rgba = np.zeros((size, size, 4), dtype=np.uint8)
    rgba[..., :3] = np.round(colour * 255).astype(np.uint8)
    rgba[..., 3] = np.where(np.isfinite(best), 255, 0)
    return rgba


def write_png(path, rgba):
    h, w, _ = rgba.shape
    raw = b"".join(b"\x00" + rgba[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def spiral_pose(i, n, phase):
    t = (i + phase) / n
    azimuth, elevation = 2 * math.pi * 3.0 * t, -0.6 + 1.4 * t
    return look_at_origin([4 * math.cos(elevation) * math.cos(azimuth), 4 * math.cos(elevation) * math.sin(azimuth),
                           4 * math.sin(elevation)])


def write_scene(folder, n_train=40, n_test=4, size=64):
    for split, n, phase in (("train", n_train, 0.0), ("test", n_test, 0.5)):
        (folder / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(n):
            c2w = spiral_pose(i, n, phase)
            write_png(folder / split / f"r_{i}.png", render_spheres(c2w, size))
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
        (folder / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": CAMERA_ANGLE_X,
                                                                     "frames": frames}))
    return folder
