"""libtessera.so through ctypes: finding it, the C signatures, errors, and array structs.

Nothing here compiles: the library is built once (``make python``) and serves every
Python >= 3.9 and every PyTorch, with the CUDA runtime inside it.
"""
import ctypes
import os
import pathlib

ABI_VERSION = 1

# tessera_status
OK, INVALID_ARGUMENT, RUNTIME, OUT_OF_MEMORY = 0, 1, 2, 3
# tessera_dtype
F32, F16, BF16, U32, U8 = 0, 1, 2, 3, 4
# tessera_device_kind
CPU, CUDA, OPENCL = 0, 1, 2


class TesseraError(RuntimeError):
    """A failure of the device or the system reported by libtessera."""


class TesseraOutOfMemoryError(TesseraError, MemoryError):
    """libtessera could not allocate device or host memory."""


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device_kind", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 2),
        ("strides", ctypes.c_int64 * 2),
    ]


class ModuleInfo(ctypes.Structure):
    _fields_ = [
        ("n_input_dims", ctypes.c_uint32),
        ("n_output_dims", ctypes.c_uint32),
        ("n_params", ctypes.c_uint64),
        ("n_matrix_params", ctypes.c_uint64),
        ("device_kind", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
    ]


class TrainerInfo(ctypes.Structure):
    _fields_ = [
        ("n_input_dims", ctypes.c_uint32),
        ("n_output_dims", ctypes.c_uint32),
        ("n_params", ctypes.c_uint64),
        ("steps", ctypes.c_uint64),
        ("skipped_steps", ctypes.c_uint32),
        ("loss_scale", ctypes.c_float),
        ("last_loss", ctypes.c_float),
        ("device_kind", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
    ]


class NerfInfo(ctypes.Structure):
    _fields_ = [
        ("steps", ctypes.c_uint64),
        ("train_seconds", ctypes.c_double),
        ("last_loss", ctypes.c_float),
        ("rays_per_step", ctypes.c_uint32),
        ("n_train_frames", ctypes.c_uint32),
        ("aabb_scale", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("height", ctypes.c_uint32),
        ("fl_x", ctypes.c_float),
        ("fl_y", ctypes.c_float),
        ("device_kind", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
    ]


class NerfProgress(ctypes.Structure):
    _fields_ = [
        ("step", ctypes.c_uint64),
        ("train_seconds", ctypes.c_double),
        ("loss", ctypes.c_float),
        ("steps_per_second", ctypes.c_double),
    ]


NerfCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(NerfProgress), ctypes.c_void_p)


class Mesh(ctypes.Structure):
    _fields_ = [
        ("n_vertices", ctypes.c_uint64),
        ("n_triangles", ctypes.c_uint64),
        ("positions", ctypes.POINTER(ctypes.c_float)),
        ("normals", ctypes.POINTER(ctypes.c_float)),
        ("colours", ctypes.POINTER(ctypes.c_uint8)),
        ("triangles", ctypes.POINTER(ctypes.c_uint32)),
    ]


def _candidates():
    explicit = os.environ.get("TESSERA_LIBRARY")
    if explicit:
        return [pathlib.Path(explicit)]
    here = pathlib.Path(__file__).resolve().parent
    found = [here / "libtessera.so"]  # the copy an installed package carries
    repo = here.parent.parent  # python/tessera -> the repository, when run from a checkout
    for build in ("build", "build-cpu"):
        found.append(repo / build / "libtessera.so")
    return found


def _load():
    tried = []
    for path in _candidates():
        if path.is_file():
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                raise ImportError(f"tessera: {path} did not load: {e}") from e
            break
        tried.append(str(path))
    else:
        raise ImportError(
            "tessera: libtessera.so not found (looked at " + ", ".join(tried) + "). Build it and install the "
            "package with `make python` in the tessera repository, or point TESSERA_LIBRARY at a libtessera.so.")
    lib.tessera_abi_version.restype = ctypes.c_int
    if lib.tessera_abi_version() != ABI_VERSION:
        raise ImportError(f"tessera: {path} has C ABI {lib.tessera_abi_version()}, this package needs {ABI_VERSION}; "
                          "rebuild it with `make python`")
    _declare(lib)
    return lib, path


def _declare(lib):
    c = ctypes
    P, T = c.c_void_p, c.POINTER(Tensor)
    sigs = {
        "tessera_last_error": (c.c_char_p, []),
        "tessera_version": (c.c_char_p, []),
        "tessera_available_devices": (c.c_int, [c.POINTER(c.c_char_p)]),
        "tessera_info": (c.c_int, [c.POINTER(c.c_char_p)]),
        "tessera_check_device": (c.c_int, [c.c_char_p, c.POINTER(c.c_int32), c.POINTER(c.c_int32)]),
        "tessera_synchronize": (c.c_int, [c.c_char_p]),
        "tessera_module_create": (c.c_int, [c.c_char_p, c.c_uint32, c.c_uint32, c.c_char_p, c.POINTER(P)]),
        "tessera_module_destroy": (None, [P]),
        "tessera_module_info_get": (c.c_int, [P, c.POINTER(ModuleInfo)]),
        "tessera_module_config": (c.c_int, [P, c.POINTER(c.c_char_p)]),
        "tessera_module_initialize": (c.c_int, [P, T, c.c_uint64, P]),
        "tessera_module_params_changed": (c.c_int, [P]),
        "tessera_module_inference": (c.c_int, [P, T, T, T, P]),
        "tessera_module_forward": (c.c_int, [P, T, T, T, P, c.POINTER(c.c_uint64)]),
        "tessera_module_backward": (c.c_int, [P, c.c_uint64, T, T, T, T, T, P]),
        "tessera_module_backward_backward": (c.c_int, [P, T, T, T, T, T, T, T, P]),
        "tessera_trainer_create": (c.c_int, [c.c_char_p, c.c_uint32, c.c_uint32, c.c_char_p, c.c_uint64, T,
                                             c.POINTER(P)]),
        "tessera_trainer_destroy": (None, [P]),
        "tessera_trainer_info_get": (c.c_int, [P, c.POINTER(TrainerInfo)]),
        "tessera_trainer_config": (c.c_int, [P, c.POINTER(c.c_char_p)]),
        "tessera_trainer_step": (c.c_int, [P, T, T, P, c.POINTER(c.c_float)]),
        "tessera_trainer_inference": (c.c_int, [P, T, T, P]),
        "tessera_trainer_get_params": (c.c_int, [P, T]),
        "tessera_trainer_set_params": (c.c_int, [P, T]),
        "tessera_trainer_params_changed": (c.c_int, [P]),
        "tessera_trainer_set_loss_scale": (c.c_int, [P, c.c_float]),
        "tessera_trainer_set_progress": (c.c_int, [P, c.c_double]),
        "tessera_trainer_save": (c.c_int, [P, c.c_char_p]),
        "tessera_trainer_load": (c.c_int, [P, c.c_char_p]),
        "tessera_nerf_default_config": (c.c_int, [c.c_double, c.c_uint64, c.POINTER(c.c_char_p)]),
        "tessera_nerf_create": (c.c_int, [c.c_char_p, c.c_char_p, c.c_char_p, c.c_uint64, c.c_uint32, c.POINTER(P)]),
        "tessera_nerf_load": (c.c_int, [c.c_char_p, c.c_char_p, c.c_uint32, c.c_char_p, c.POINTER(P)]),
        "tessera_nerf_destroy": (None, [P]),
        "tessera_nerf_info_get": (c.c_int, [P, c.POINTER(NerfInfo)]),
        "tessera_nerf_train": (c.c_int, [P, c.c_double, c.c_uint64, c.c_uint32, NerfCallback, P]),
        "tessera_nerf_evaluate": (c.c_int, [P, c.c_uint32, c.POINTER(c.c_char_p)]),
        "tessera_nerf_render": (c.c_int, [P, c.POINTER(c.c_float), c.c_uint32, c.c_uint32, c.c_float,
                                          c.POINTER(c.c_float), c.POINTER(c.c_float)]),
        "tessera_nerf_save": (c.c_int, [P, c.c_char_p]),
        "tessera_nerf_mesh": (c.c_int, [P, c.c_uint32, c.c_float, c.c_int, c.POINTER(Mesh)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


lib, library_path = _load()


def check(status):
    """Raises the Python exception for a non-OK status, with the library's message."""
    if status == OK:
        return
    message = lib.tessera_last_error().decode("utf-8", "replace")
    if status == INVALID_ARGUMENT:
        raise ValueError(message)
    if status == OUT_OF_MEMORY:
        raise TesseraOutOfMemoryError(message)
    raise TesseraError(message)


def string_out(fn, *args):
    """Calls a C function that returns a string through its last argument."""
    out = ctypes.c_char_p()
    check(fn(*args, ctypes.byref(out)))
    return out.value.decode("utf-8")


def numpy_tensor(array):
    """A Tensor of a contiguous float32 numpy array (1-D or 2-D) on the host."""
    shape = array.shape if array.ndim == 2 else (array.shape[0], 1)
    strides = tuple(s // 4 for s in array.strides) if array.ndim == 2 else (1, 1)
    return Tensor(array.ctypes.data, F32, CPU, 0, array.ndim, shape, strides)
