"""pytest setup: the device under test ($TESSERA_TEST_DEVICE: cpu in CI, cuda on the GPU host)
and the package from this checkout when it is not installed."""
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if "tessera" not in sys.modules:
    sys.path.insert(0, str(ROOT / "python"))


@pytest.fixture(scope="session")
def device():
    import torch
    name = os.environ.get("TESSERA_TEST_DEVICE", "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip(f"TESSERA_TEST_DEVICE={name} but torch sees no CUDA device")
    return torch.device(name)


@pytest.fixture(scope="session")
def on_gpu(device):
    return device.type == "cuda"
