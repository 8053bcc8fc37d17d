"""NeRF from Python: train a scene for a budget, evaluate, render cameras to arrays, save and
resume snapshots, extract meshes; the library's trainer and training loop (`tessera nerf
train`'s) underneath.

    from tessera.nerf import Nerf
    nerf = Nerf("data/lego", config=Nerf.default_config(seconds=30), device="cuda")
    nerf.train(seconds=30, callback=lambda p: print(p["step"], p["loss"]))
    print(nerf.evaluate())                       # PSNR / SSIM, both protocols
    rgba = nerf.render(transform_matrix, 800, 800)   # numpy [800, 800, 4]
    nerf.save("lego.tnerf")
"""
import ctypes
import json

import numpy as np

from . import _capi

__all__ = ["Nerf"]


class Nerf:
    """A NeRF of one scene (a folder or transforms file, a COLMAP model or an LLFF folder, as
    `tessera nerf train` takes it; `holdout=8` holds back every 8th image of a scene without
    split files for evaluate()). `config=None` is the default config with its short-budget
    hash grid (2 features per level); `Nerf.default_config(seconds=300)` is `tessera nerf
    train`'s config for a budget (4 features per level, the finest at 1448 x aabb_scale cells
    per unit, from 30 s / 15000 steps; Adam at 1e-2 instead of 2e-2 from 300 s / 150000
    steps)."""

    def __init__(self, scene, config=None, device="cpu", seed=1337, holdout=0, _handle=None):
        if _handle is not None:
            self._handle = _handle
            return
        self._handle = ctypes.c_void_p()
        text = None if config is None else (config if isinstance(config, str) else json.dumps(config)).encode()
        _capi.check(_capi.lib.tessera_nerf_create(str(scene).encode(), text, str(device).encode(), int(seed),
                                                  int(holdout), ctypes.byref(self._handle)))

    @staticmethod
    def default_config(seconds=0, steps=0):
        """The default config (a dict) for a training budget, as `tessera nerf train` picks it
        (0: no limit of that kind): pass it to Nerf(scene, config=...) before train()."""
        return json.loads(_capi.string_out(_capi.lib.tessera_nerf_default_config, float(seconds), int(steps)))

    @classmethod
    def load(cls, snapshot, scene=None, device="cpu", holdout=0):
        """A snapshot: with `scene`, training resumes on it; without, it renders and meshes."""
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib.tessera_nerf_load(str(snapshot).encode(), None if scene is None else str(scene).encode(),
                                                int(holdout), str(device).encode(), ctypes.byref(handle)))
        return cls(None, _handle=handle)

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.tessera_nerf_destroy(self._handle)
            self._handle = None

    def info(self):
        """{"steps", "train_seconds", "last_loss", "rays_per_step", "n_train_frames", "aabb_scale",
        "width", "height", "fl_x", "fl_y"}: where the run stands and the training camera."""
        i = _capi.NerfInfo()
        _capi.check(_capi.lib.tessera_nerf_info_get(self._handle, ctypes.byref(i)))
        return {name: getattr(i, name) for name, _ in i._fields_ if not name.startswith("device")}

    @property
    def steps(self):
        return self.info()["steps"]

    def train(self, seconds=None, steps=None, callback=None, callback_every=16):
        """Trains `seconds` more of training time and/or `steps` more steps. callback(progress)
        gets {"step", "train_seconds", "loss", "steps_per_second"} every callback_every steps;
        returning True stops the run. Exceptions in it stop the run and are raised here."""
        if not seconds and not steps:
            raise ValueError("train: give seconds or steps")
        failure = []

        def on_progress(progress, _user):
            p = progress.contents
            try:
                return 1 if callback({"step": p.step, "train_seconds": p.train_seconds, "loss": p.loss,
                                      "steps_per_second": p.steps_per_second}) else 0
            except BaseException as e:  # raised after the C call returns
                failure.append(e)
                return 1

        fn = _capi.NerfCallback(on_progress) if callback else _capi.NerfCallback()
        status = _capi.lib.tessera_nerf_train(self._handle, float(seconds or 0), int(steps or 0),
                                              int(callback_every), fn, None)
        if failure:
            raise failure[0]
        _capi.check(status)
        return self.info()

    def evaluate(self, max_views=0):
        """Test-split PSNR and SSIM: on white (NeRF-standard) and on black, linear (instant-ngp's)."""
        return json.loads(_capi.string_out(_capi.lib.tessera_nerf_evaluate, self._handle, int(max_views)))

    def render(self, transform_matrix, width, height, fov_x=None, background=(0.0, 0.0, 0.0)):
        """RGBA float32 [height, width, 4] of a camera: transform_matrix camera-to-world [4, 4]
        (or [3, 4]) as in transforms.json; fov_x in degrees (None: the training camera's)."""
        m = np.asarray(transform_matrix, dtype=np.float32)
        if m.shape == (3, 4):
            m = np.vstack([m, np.array([0, 0, 0, 1], dtype=np.float32)])
        if m.shape != (4, 4):
            raise ValueError(f"transform_matrix: expects [4, 4] or [3, 4], got {list(m.shape)}")
        m = np.ascontiguousarray(m)
        bg = np.ascontiguousarray(background, dtype=np.float32)
        if bg.shape != (3,):
            raise ValueError("background: expects 3 values (linear RGB)")
        out = np.empty((int(height), int(width), 4), dtype=np.float32)
        f = ctypes.POINTER(ctypes.c_float)
        _capi.check(_capi.lib.tessera_nerf_render(self._handle, m.ctypes.data_as(f), int(width), int(height),
                                                  float(fov_x or 0.0), bg.ctypes.data_as(f), out.ctypes.data_as(f)))
        return out

    def save(self, path):
        """A snapshot for `tessera nerf render|eval|train --resume` and Nerf.load."""
        _capi.check(_capi.lib.tessera_nerf_save(self._handle, str(path).encode()))

    def mesh(self, resolution=256, threshold=2.5, colours=True):
        """The isosurface density = threshold: {"positions" [n, 3], "normals" [n, 3],
        "colours" [n, 3] uint8 (or None), "triangles" [m, 3] uint32} in the scene's coordinates."""
        m = _capi.Mesh()
        _capi.check(_capi.lib.tessera_nerf_mesh(self._handle, int(resolution), float(threshold), int(bool(colours)),
                                                ctypes.byref(m)))
        nv, nt = m.n_vertices, m.n_triangles

        def copy(pointer, n, dtype):
            return np.ctypeslib.as_array(pointer, shape=(n, 3)).astype(dtype, copy=True) if n else \
                np.zeros((0, 3), dtype=dtype)

        return {"positions": copy(m.positions, nv, np.float32), "normals": copy(m.normals, nv, np.float32),
                "colours": copy(m.colours, nv, np.uint8) if m.colours else None,
                "triangles": copy(m.triangles, nt, np.uint32)}
