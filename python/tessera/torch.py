"""PyTorch modules on tessera: a drop-in for tinycudann's.

    import tessera.torch as tcnn
    encoding = tcnn.Encoding(3, {"otype": "HashGrid", "n_levels": 16, ...})
    network = tcnn.Network(32, 1, {"otype": "FullyFusedMLP", "n_neurons": 64, ...})
    model = tcnn.NetworkWithInputEncoding(3, 1, encoding_config, network_config)

Each module holds its parameters as one flat fp32 ``params`` Parameter in tinycudann's
layout (network matrices first, then the encoding tables), so any torch optimizer, DDP,
state_dict and pickling work. Calls run on the device of the input (CPU tensors on the
CPU backend) on the caller's current CUDA stream. Outputs are fp32 unless output_dtype
(or an Encoding's dtype) asks for fp16. For speed, ``Trainer`` runs forward, loss, backward
and tessera's Adam as one fused step.
"""
import ctypes
import json

import torch

from . import _capi, devices
from ._trainer_handle import TrainerHandle

__all__ = ["Module", "Network", "Encoding", "NetworkWithInputEncoding", "Trainer", "free_temporary_memory"]


def _kind_index(device):
    if device.type == "cuda":
        return _capi.CUDA, device.index if device.index is not None else torch.cuda.current_device()
    if device.type == "cpu":
        return _capi.CPU, 0
    raise ValueError(f"tessera runs on cpu and cuda tensors, not on {device}")


def _device_name(device):
    kind, index = _kind_index(device)
    return "cpu" if kind == _capi.CPU else f"cuda:{index}"


def _tensor(t, kind_index):
    """The C struct of a float32 torch tensor (1-D, or 2-D with adjacent columns)."""
    kind, index = kind_index
    if t.dim() == 2:
        return _capi.Tensor(t.data_ptr(), _capi.F32, kind, index, 2, t.shape, t.stride())
    return _capi.Tensor(t.data_ptr(), _capi.F32, kind, index, 1, (t.shape[0], 1), (1, 1))


# The caller's current CUDA stream: torch's raw query where it has one (a few times faster
# than building a torch.cuda.Stream object per call).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device):
    if device.type != "cuda":
        return None
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def _default_device():
    if torch.cuda.is_available() and any(d.startswith("cuda") for d in devices()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _Native:
    """One C module handle on one device, bound to whichever params the calls pass."""

    def __init__(self, config_text, n_input_dims, n_output_dims, device_name):
        self.handle = ctypes.c_void_p()
        _capi.check(_capi.lib.tessera_module_create(config_text.encode(), n_input_dims, n_output_dims,
                                                    device_name.encode(), ctypes.byref(self.handle)))
        info = _capi.ModuleInfo()
        _capi.check(_capi.lib.tessera_module_info_get(self.handle, ctypes.byref(info)))
        self.info = info
        self.params_key = None  # (address, version, epoch) of the params it last used

    def __del__(self):
        if getattr(self, "handle", None):
            _capi.lib.tessera_module_destroy(self.handle)
            self.handle = None

    def config(self):
        return _capi.string_out(_capi.lib.tessera_module_config, self.handle)

    def use_params(self, params, epoch):
        """Tells the module when the parameter values changed since its last call."""
        key = (params.data_ptr(), params._version, epoch)
        if key != self.params_key:
            if self.params_key is not None:
                _capi.check(_capi.lib.tessera_module_params_changed(self.handle))
            self.params_key = key


def _rows_contiguous(t):
    """t itself when its rows are contiguous (what the C API takes), else a contiguous copy."""
    return t if t.stride(-1) == 1 and (t.shape[0] <= 1 or t.stride(0) >= t.shape[1]) else t.contiguous()


class _ModuleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, module, x, params):
        native, where = module._native_for(x.device)
        native.use_params(params, module._params_epoch)
        out = torch.empty((x.shape[0], module.n_output_dims), dtype=torch.float32, device=x.device)
        context = ctypes.c_uint64()
        _capi.check(_capi.lib.tessera_module_forward(native.handle, _tensor(params, where), _tensor(x, where),
                                                     _tensor(out, where), _stream(x.device), ctypes.byref(context)))
        ctx.save_for_backward(x, params)
        ctx.call = (native, where, context.value, module._params_epoch)
        return out

    @staticmethod
    def backward(ctx, dL_dout):
        x, params = ctx.saved_tensors
        dL_dout = _rows_contiguous(dL_dout.float())
        if torch.is_grad_enabled() and ctx.needs_input_grad[1]:
            # create_graph=True: the input gradient is itself differentiable (an eikonal loss).
            dL_dx, grads = _BackwardFunction.apply(ctx.call, x, params, dL_dout)
        else:
            dL_dx, grads = _backward(ctx.call, ctx.needs_input_grad[1], x, params, dL_dout)
        return None, dL_dx, grads


def _backward(call, input_gradient, x, params, dL_dout):
    native, where, context, epoch = call
    native.use_params(params, epoch)
    grads = torch.empty_like(params)
    dL_dx = torch.empty_like(x) if input_gradient else None
    _capi.check(_capi.lib.tessera_module_backward(
        native.handle, context, _tensor(params, where), _tensor(grads, where), _tensor(x, where),
        _tensor(dL_dout, where), _tensor(dL_dx, where) if dL_dx is not None else None, _stream(x.device)))
    return dL_dx, grads


class _BackwardFunction(torch.autograd.Function):
    """The backward pass as a differentiable function: its own backward is the module's
    backward_backward_input (grid encodings; other modules raise, naming themselves)."""

    @staticmethod
    def forward(ctx, call, x, params, dL_dout):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, params, dL_dout)
        ctx.call = call
        return _backward(call, True, x, params, dL_dout)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dL_ddLdx, dL_dgrads):
        if dL_dgrads is not None:
            raise NotImplementedError("tessera: a loss on the parameter gradient (second derivatives through it) is "
                                      "not supported; losses on the input gradient are")
        if dL_ddLdx is None:
            return None, None, None, None
        x, params, dL_dout = ctx.saved_tensors
        native, where, _, epoch = ctx.call
        native.use_params(params, epoch)
        grads = torch.empty_like(params)
        dL_ddLdout = torch.empty_like(dL_dout) if ctx.needs_input_grad[3] else None
        dL_dx = torch.empty_like(x) if ctx.needs_input_grad[1] else None
        _capi.check(_capi.lib.tessera_module_backward_backward(
            native.handle, _tensor(params, where), _tensor(grads, where), _tensor(x, where), _tensor(dL_dout, where),
            _tensor(_rows_contiguous(dL_ddLdx.float()), where),
            _tensor(dL_ddLdout, where) if dL_ddLdout is not None else None,
            _tensor(dL_dx, where) if dL_dx is not None else None, _stream(x.device)))
        return None, dL_dx, grads, dL_ddLdout


class Module(torch.nn.Module):
    """A tessera module (any module config: encodings, networks, Sequential, Parallel).

    module_config: a module config dict, or tinycudann's {"encoding": ..., "network": ...};
    n_output_dims: the network's output width (None where the config gives it).
    """

    def __init__(self, n_input_dims, module_config, n_output_dims=None, seed=1337, output_dtype=None, device=None):
        super().__init__()
        text = json.dumps(module_config)
        cpu = _Native(text, int(n_input_dims), int(n_output_dims or 0), "cpu")
        self.n_input_dims = int(n_input_dims)
        self.n_output_dims = int(cpu.info.n_output_dims)
        self.seed = seed
        self.output_dtype = output_dtype if output_dtype is not None else torch.float32
        if self.output_dtype not in (torch.float32, torch.float16):
            raise TypeError(f"output_dtype: torch.float32 or torch.float16, not {self.output_dtype}")
        self.dtype = self.output_dtype
        self.loss_scale = 1.0  # gradients come back unscaled: tessera scales the fp16 backward inside
        self.module_config = json.loads(cpu.config())
        self._config_text = json.dumps(self.module_config)
        params = torch.zeros(int(cpu.info.n_params), dtype=torch.float32)
        if params.numel():
            _capi.check(_capi.lib.tessera_module_initialize(cpu.handle, _tensor(params, (_capi.CPU, 0)), int(seed),
                                                            None))
        self._natives = {"cpu": cpu}  # by device name, and (native, kind/index) by torch.device
        self._params_epoch = 0
        self.params = torch.nn.Parameter(params.to(device if device is not None else _default_device()))

    @property
    def n_params(self):
        return self.params.numel()

    def _native_for(self, device):
        found = self._natives.get(device)
        if found is None:
            name = _device_name(device)
            native = self._natives.get(name)
            if native is None:
                native = _Native(self._config_text, self.n_input_dims, self.n_output_dims, name)
                self._natives[name] = native
            found = self._natives[device] = (native, (native.info.device_kind, native.info.device_index))
        return found

    def _check_input(self, x):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input: expects a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"input: expects floating-point values, got {x.dtype}")
        if x.dim() < 1 or x.shape[-1] != self.n_input_dims:
            raise ValueError(f"input: expects shape [..., {self.n_input_dims}], got {list(x.shape)}")
        if x.device != self.params.device:
            raise ValueError(f"input is on {x.device}, the module's params on {self.params.device}; "
                             "move one of them with .to()")

    def forward(self, x):
        self._check_input(x)
        batch_shape = x.shape[:-1]
        x2 = x.reshape(-1, self.n_input_dims)
        if x2.dtype != torch.float32:
            x2 = x2.float()
        x2 = _rows_contiguous(x2)
        if torch.is_grad_enabled() and (x2.requires_grad or self.params.requires_grad):
            out = _ModuleFunction.apply(self, x2, self.params)
        else:
            out = self._inference(x2)
        out = out.reshape(*batch_shape, self.n_output_dims)
        return out if self.output_dtype == torch.float32 else out.to(self.output_dtype)

    def _inference(self, x):
        native, where = self._native_for(x.device)
        native.use_params(self.params, self._params_epoch)
        out = torch.empty((x.shape[0], self.n_output_dims), dtype=torch.float32, device=x.device)
        _capi.check(_capi.lib.tessera_module_inference(native.handle, _tensor(self.params.detach(), where),
                                                       _tensor(x, where), _tensor(out, where), _stream(x.device)))
        return out

    def _params_changed_outside_torch(self):
        """Parameters were written by tessera (a fused Trainer step): refresh derived copies."""
        self._params_epoch += 1

    # Handles are per process: pickles and deep copies rebuild them.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_natives"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._natives = {}

    def extra_repr(self):
        return (f"n_input_dims={self.n_input_dims}, n_output_dims={self.n_output_dims}, n_params={self.n_params}, "
                f"config={self._config_text}")


class Network(Module):
    """tinycudann.Network: an MLP ("FullyFusedMLP", "CutlassMLP" or "MLP" config)."""

    def __init__(self, n_input_dims, n_output_dims, network_config, seed=1337, output_dtype=None, device=None):
        super().__init__(n_input_dims, network_config, n_output_dims, seed, output_dtype, device)
        self.network_config = network_config


class Encoding(Module):
    """tinycudann.Encoding: HashGrid, DenseGrid, Frequency, SphericalHarmonics, OneBlob,
    TriangleWave, Identity, Composite. dtype: the output's (torch.float32 default, or
    torch.float16)."""

    def __init__(self, n_input_dims, encoding_config, seed=1337, dtype=None, device=None):
        super().__init__(n_input_dims, encoding_config, None, seed, dtype, device)
        self.encoding_config = encoding_config


class NetworkWithInputEncoding(Module):
    """tinycudann.NetworkWithInputEncoding: an encoding feeding an MLP, fused where it can be."""

    def __init__(self, n_input_dims, n_output_dims, encoding_config, network_config, seed=1337, output_dtype=None,
                 device=None):
        super().__init__(n_input_dims, {"encoding": encoding_config, "network": network_config}, n_output_dims, seed,
                         output_dtype, device)
        self.encoding_config = encoding_config
        self.network_config = network_config


class Trainer(TrainerHandle):
    """Trains a tessera module with one fused call per step: forward, the loss, backward and
    tessera's optimizer (tiny-cuda-nn's Adam: no L2 on encoding tables, untouched table
    entries keep their moments, a dynamic loss scale, non-finite steps skipped). The
    module's ``params`` are trained in place, so the module itself sees every step.

        trainer = tessera.torch.Trainer(model, loss={"otype": "L2"},
                                        optimizer={"otype": "Adam", "learning_rate": 1e-2})
        for x, y in batches:
            trainer.step(x, y)             # queued; no host synchronization
        print(trainer.last_loss())
    """

    def __init__(self, module, loss=None, optimizer=None):
        if not isinstance(module, Module):
            raise TypeError(f"Trainer trains a tessera.torch module, not {type(module).__name__}")
        self.module = module
        config = {"model": module.module_config, "loss": loss or {"otype": "L2"},
                  "optimizer": optimizer or {"otype": "Adam"}}
        self.device = module.params.device
        self._where = _kind_index(self.device)
        handle = ctypes.c_void_p()
        with torch.no_grad():
            params = module.params.detach()
            _capi.check(_capi.lib.tessera_trainer_create(
                json.dumps(config).encode(), module.n_input_dims, module.n_output_dims,
                _device_name(self.device).encode(), int(module.seed), _tensor(params, self._where),
                ctypes.byref(handle)))
        super().__init__(handle)
        self._params_ptr = params.data_ptr()

    def _matrix(self, t, width, what):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: expects a torch.Tensor, got {type(t).__name__}")
        if t.device != self.device:
            raise ValueError(f"{what} is on {t.device}, the trainer on {self.device}")
        if t.shape[-1] != width:
            raise ValueError(f"{what}: expects shape [..., {width}], got {list(t.shape)}")
        return t.reshape(-1, width).float().contiguous()

    def step(self, x, target):
        """One training step (queued on the current stream)."""
        if self.module.params.data_ptr() != self._params_ptr:
            raise RuntimeError("the module's params moved (.to() or a new tensor) since this Trainer was made; "
                               "make a new Trainer")
        x = self._matrix(x, self.module.n_input_dims, "input")
        target = self._matrix(target, self.module.n_output_dims, "target")
        if x.shape[0] != target.shape[0]:
            raise ValueError(f"input has {x.shape[0]} rows, target has {target.shape[0]}")
        _capi.check(_capi.lib.tessera_trainer_step(self._handle, _tensor(x, self._where), _tensor(target, self._where),
                                                   _stream(self.device), None))
        self.module._params_changed_outside_torch()

    def training_step(self, x, target):
        """step(), then its loss."""
        self.step(x, target)
        return self.last_loss()

    def load(self, path):
        super().load(path)
        self.module._params_changed_outside_torch()


def free_temporary_memory():
    """tinycudann's name; tessera keeps its scratch per module (nothing to free globally)."""
