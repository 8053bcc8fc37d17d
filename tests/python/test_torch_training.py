"""Training with tessera.torch: torch optimizers over `params`, the fused Trainer, state_dict,
pickling and copies, and bad inputs that must raise clear Python exceptions."""
import copy
import io
import math
import os
import pickle
import subprocess
import sys

import pytest
import torch

import tessera.torch as tcnn

GRID = {"otype": "HashGrid", "n_levels": 8, "n_features_per_level": 2, "log2_hashmap_size": 15,
        "base_resolution": 4, "per_level_scale": 1.5}
MLP = {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
       "n_hidden_layers": 2}


def target_image(x):
    """A 2-D RGB pattern with edges and smooth parts: what a small image fit learns."""
    u, v = x[:, 0:1], x[:, 1:2]
    r = 0.5 + 0.5 * torch.sin(12 * u) * torch.cos(9 * v)
    g = ((u - 0.5) ** 2 + (v - 0.5) ** 2 < 0.09).float()
    b = (torch.floor(u * 6) + torch.floor(v * 6)) % 2
    return torch.cat([r, g, b], dim=1)


def psnr(model, device, n=16384):
    gen = torch.Generator().manual_seed(99)
    x = torch.rand(n, 2, generator=gen).to(device)
    with torch.no_grad():
        mse = ((model(x) - target_image(x)) ** 2).mean().item()
    return -10 * math.log10(mse)


def test_torch_adam_learns_an_image(device):
    torch.manual_seed(0)
    model = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
    for _ in range(300):
        x = torch.rand(4096, 2, device=device)
        loss = ((model(x) - target_image(x)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    quality = psnr(model, device)
    print(f"torch Adam, 300 steps on {device}: {quality:.2f} dB")
    assert quality > 24.0


def test_fused_trainer_learns_an_image_and_updates_the_module(device):
    torch.manual_seed(0)
    model = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, device=device)
    trainer = tcnn.Trainer(model, loss={"otype": "L2"}, optimizer={"otype": "Adam", "learning_rate": 1e-2})
    first = trainer.training_step(torch.rand(4096, 2, device=device), target_image(torch.rand(4096, 2, device=device)))
    for _ in range(299):
        x = torch.rand(4096, 2, device=device)
        trainer.step(x, target_image(x))
    assert trainer.steps == 300 and trainer.last_loss() < first * 0.2
    # The module trained in place: its own forward sees every step.
    quality = psnr(model, device)
    print(f"fused Trainer, 300 steps on {device}: {quality:.2f} dB")
    assert quality > 24.0


def test_fused_trainer_snapshot_resumes(device, tmp_path):
    torch.manual_seed(0)
    model = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, device=device)
    trainer = tcnn.Trainer(model, optimizer={"otype": "Adam", "learning_rate": 1e-2})
    xs = [torch.rand(1024, 2, device=device) for _ in range(20)]
    for x in xs[:10]:
        trainer.step(x, target_image(x))
    trainer.save(tmp_path / "run.snapshot")
    saved = model.params.detach().clone()
    for x in xs[10:]:
        trainer.step(x, target_image(x))
    after_20 = model.params.detach().clone()
    trainer.load(tmp_path / "run.snapshot")
    assert trainer.steps == 10
    torch.testing.assert_close(model.params.detach(), saved, rtol=0, atol=0)
    for x in xs[10:]:
        trainer.step(x, target_image(x))
    if device.type == "cpu":  # the same steps bit for bit
        torch.testing.assert_close(model.params.detach(), after_20, rtol=0, atol=0)
    else:  # CUDA's atomics add in any order: the same model up to that
        test = torch.rand(4096, 2, device=device)
        with torch.no_grad():
            resumed_out = model(test)
            model.params.copy_(after_20)
            torch.testing.assert_close(resumed_out, model(test), rtol=0.05, atol=0.02)


def test_state_dict_pickle_and_deepcopy_round_trip(device):
    torch.manual_seed(1)
    model = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, seed=7, device=device)
    x = torch.rand(256, 2, device=device)
    y = model(x).detach()
    other = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, seed=8, device=device)
    assert not torch.equal(other(x), y)
    other.load_state_dict(model.state_dict())
    torch.testing.assert_close(other(x), y, rtol=0, atol=0)

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)  # a whole module, not only tensors
    torch.testing.assert_close(loaded(x), y, rtol=0, atol=0)
    torch.testing.assert_close(pickle.loads(pickle.dumps(model))(x), y, rtol=0, atol=0)
    clone = copy.deepcopy(model)
    torch.testing.assert_close(clone(x), y, rtol=0, atol=0)
    with torch.no_grad():
        clone.params.zero_()  # the copy has params of its own
    torch.testing.assert_close(model(x), y, rtol=0, atol=0)


def test_seed_gives_the_same_initial_params():
    a = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, seed=5, device="cpu")
    b = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, seed=5, device="cpu")
    c = tcnn.NetworkWithInputEncoding(2, 3, GRID, MLP, seed=6, device="cpu")
    assert torch.equal(a.params, b.params) and not torch.equal(a.params, c.params)


def test_bad_inputs_raise_clear_errors(device):
    net = tcnn.Network(3, 2, MLP, device=device)
    with pytest.raises(TypeError, match="floating-point"):
        net(torch.ones(4, 3, dtype=torch.int64, device=device))
    with pytest.raises(TypeError, match="torch.Tensor"):
        net([[0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"\[\.\.\., 3\]"):
        net(torch.rand(4, 5, device=device))
    with pytest.raises(ValueError, match="meta"):
        net(torch.rand(4, 3, device="meta"))
    with pytest.raises(ValueError, match="HashGird"):
        tcnn.Encoding(3, {"otype": "HashGird"})
    with pytest.raises(ValueError, match="n_neurons"):
        tcnn.Network(3, 1, {"otype": "FullyFusedMLP", "n_neurons": 48})
    with pytest.raises(ValueError, match="n_levles"):
        tcnn.Encoding(3, {"otype": "HashGrid", "n_levles": 4})
    with pytest.raises(TypeError, match="output_dtype"):
        tcnn.Network(3, 1, MLP, output_dtype=torch.int32)
    trainer = tcnn.Trainer(net)
    with pytest.raises(ValueError, match="rows"):
        trainer.step(torch.rand(8, 3, device=device), torch.rand(4, 2, device=device))
    with pytest.raises(TypeError, match="tessera.torch module"):
        tcnn.Trainer(torch.nn.Linear(3, 2))


def test_missing_library_is_an_import_error_saying_how_to_build():
    env = dict(os.environ, TESSERA_LIBRARY="/nonexistent/libtessera.so")
    python_dir = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    env["PYTHONPATH"] = os.path.abspath(python_dir)
    result = subprocess.run([sys.executable, "-c", "import tessera"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "make python" in result.stderr
