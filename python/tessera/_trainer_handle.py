"""What the numpy and the PyTorch trainers share: the C trainer handle, its counters,
config and snapshots."""
import ctypes
import json

from . import _capi


class TrainerHandle:
    def __init__(self, handle):
        self._handle = handle
        info = self._info()
        self._widths = (info.n_input_dims, info.n_output_dims, info.n_params)

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.tessera_trainer_destroy(self._handle)
            self._handle = None

    def _info(self):
        info = _capi.TrainerInfo()
        _capi.check(_capi.lib.tessera_trainer_info_get(self._handle, ctypes.byref(info)))
        return info

    @property
    def n_input_dims(self):
        return self._widths[0]

    @property
    def n_output_dims(self):
        return self._widths[1]

    @property
    def n_params(self):
        return self._widths[2]

    @property
    def steps(self):
        """Optimizer steps taken (skipped non-finite steps not counted)."""
        return self._info().steps

    @property
    def skipped_steps(self):
        """Steps skipped for non-finite gradients (the dynamic loss scale then halves)."""
        return self._info().skipped_steps

    @property
    def loss_scale(self):
        return self._info().loss_scale

    @loss_scale.setter
    def loss_scale(self, value):
        _capi.check(_capi.lib.tessera_trainer_set_loss_scale(self._handle, float(value)))

    def set_progress(self, fraction):
        """How much of your training budget is spent (0 to 1): an optimizer "BudgetDecay"
        anneals by it; call it before each step (or now and then)."""
        _capi.check(_capi.lib.tessera_trainer_set_progress(self._handle, float(fraction)))

    def last_loss(self):
        """The latest step's mean loss (waits for it)."""
        return self._info().last_loss

    @property
    def config(self):
        """{"model", "loss", "optimizer"}: a trainer made from it is the same trainer."""
        return json.loads(_capi.string_out(_capi.lib.tessera_trainer_config, self._handle))

    def save(self, path):
        """A snapshot: parameters, the optimizer's state and the counters (resume with load)."""
        _capi.check(_capi.lib.tessera_trainer_save(self._handle, str(path).encode()))

    def load(self, path):
        """Resumes from a snapshot of a trainer of the same config."""
        _capi.check(_capi.lib.tessera_trainer_load(self._handle, str(path).encode()))
