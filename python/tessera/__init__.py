"""tessera from Python: fully fused MLPs, hash grids and NeRF on libtessera's C API.

    import tessera                    # numpy: tessera.Trainer, tessera.devices()
    import tessera.torch as tcnn      # PyTorch: a drop-in for tinycudann's modules

Nothing compiles at import: libtessera.so is found next to this package (``make python``
installs it there), in a build tree of the repository, or at $TESSERA_LIBRARY.
"""
import ctypes
import json

import numpy as np

from . import _capi
from ._capi import TesseraError, TesseraOutOfMemoryError
from ._trainer_handle import TrainerHandle

__all__ = ["Trainer", "devices", "info", "version", "TesseraError", "TesseraOutOfMemoryError", "library_path"]

library_path = str(_capi.library_path)


def version():
    """The library's version ("0.1.0")."""
    return _capi.lib.tessera_version().decode()


def info():
    """What this build and machine have, as `tessera info --json` reports it: a dict with
    "version", "backends", "cuda_architectures", "cuda_devices" (each GPU's name, compute
    capability, limits and "kernels": which code of the build it runs, the driver, and the
    kernel each op takes on it) and "opencl_devices"."""
    return json.loads(_capi.string_out(_capi.lib.tessera_info))


def devices():
    """Every device this build and machine can run on: ["cpu", "cuda:0", ...]."""
    return _capi.string_out(_capi.lib.tessera_available_devices).split(",")


def _matrix(x, width, what):
    """x as a contiguous float32 [batch, width] numpy array (a copy only where needed)."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{what}: expects numbers, got dtype {a.dtype}")
    if a.ndim == 1 and width == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != width:
        raise ValueError(f"{what}: expects shape [batch, {width}], got {list(a.shape)}")
    return np.ascontiguousarray(a, dtype=np.float32)


class Trainer(TrainerHandle):
    """A model, its loss and its optimizer, trained one fused step at a time (numpy arrays in
    and out; the model lives on `device`).

        trainer = tessera.Trainer.from_config({"encoding": {...}, "network": {...}}, 2, 3)
        loss = trainer.training_step(x, y)      # x [batch, 2], y [batch, 3]
        y_hat = trainer.inference(x)
    """

    @classmethod
    def from_config(cls, config, n_input_dims, n_output_dims, device="cpu", seed=1337):
        """config: tiny-cuda-nn's {"encoding"?, "network", "loss"?, "optimizer"?} or {"model": ...}
        (a dict or JSON text)."""
        text = config if isinstance(config, str) else json.dumps(config)
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib.tessera_trainer_create(text.encode(), int(n_input_dims), int(n_output_dims),
                                                     str(device).encode(), int(seed), None, ctypes.byref(handle)))
        return cls(handle)

    def training_step(self, x, y):
        """One step on inputs x [batch, n_input_dims] and targets y [batch, n_output_dims]; the mean loss."""
        xs = _matrix(x, self.n_input_dims, "x")
        ys = _matrix(y, self.n_output_dims, "y")
        if xs.shape[0] != ys.shape[0]:
            raise ValueError(f"x has {xs.shape[0]} rows, y has {ys.shape[0]}")
        loss = ctypes.c_float()
        _capi.check(_capi.lib.tessera_trainer_step(self._handle, _capi.numpy_tensor(xs), _capi.numpy_tensor(ys),
                                                   None, ctypes.byref(loss)))
        return loss.value

    def inference(self, x):
        """The model's output [batch, n_output_dims] for x [batch, n_input_dims]."""
        xs = _matrix(x, self.n_input_dims, "x")
        out = np.empty((xs.shape[0], self.n_output_dims), dtype=np.float32)
        _capi.check(_capi.lib.tessera_trainer_inference(self._handle, _capi.numpy_tensor(xs),
                                                        _capi.numpy_tensor(out), None))
        return out

    @property
    def params(self):
        """A copy of the parameters (fp32, tiny-cuda-nn's layout)."""
        out = np.empty(self.n_params, dtype=np.float32)
        _capi.check(_capi.lib.tessera_trainer_get_params(self._handle, _capi.numpy_tensor(out)))
        return out

    @params.setter
    def params(self, values):
        a = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        _capi.check(_capi.lib.tessera_trainer_set_params(self._handle, _capi.numpy_tensor(a)))
