"""Second derivatives (torch.autograd.grad(..., create_graph=True) through tessera modules): a
loss on dL/dx, as an eikonal term is, differentiated again with respect to the parameters,
the input and the first backward's dL/dy, against float64 PyTorch references of the same
parameters: grid encodings, MLPs of every activation, an encoding feeding an MLP. Modules
without them (Conv2d) say so."""
import pytest
import torch

import reference
import tessera.torch as tcnn


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-12)).item()


def _second(fn, x, params, w, v):
    """Gradients of sum(dL/dx * v), dL/dx = the gradient of sum(fn(x) * w), w.r.t. params, x, w."""
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    (dx,) = torch.autograd.grad((fn(x, params) * w).sum(), x, create_graph=True)
    return torch.autograd.grad((dx * v.to(dx)).sum(), [params, x, w], allow_unused=True)


def _errors(got, want):
    return {name: rel_err(g.cpu(), r) for name, g, r in zip(("d/dparams", "d/dx", "d/d(dL/dy)"), got, want)
            if r is not None and r.abs().max() > 0}


def _tolerance(device):
    """fp32 (CPU) against float64; on CUDA the fused MLP's fp16 operands (3x the largest error
    measured on an H100, 4.3e-3, HashGrid -> MLP)."""
    return 1e-4 if device.type == "cpu" else 1.5e-2


@pytest.mark.parametrize("activation,output_activation", [("ReLU", "None"), ("Tanh", "Sigmoid"), ("Softplus", "None"),
                                                          ("SiLU", "Exponential"), ("Sine", "LeakyReLU")])
def test_network_second_derivatives_match_reference(device, activation, output_activation):
    torch.manual_seed(9)
    config = {"otype": "FullyFusedMLP", "n_neurons": 16, "n_hidden_layers": 2, "activation": activation,
              "output_activation": output_activation}
    net = tcnn.Network(5, 3, config, device=device)
    with torch.no_grad():
        net.params.uniform_(-0.4, 0.4)
    x, w, v = torch.rand(300, 5) * 2 - 1, torch.randn(300, 3), torch.randn(300, 5)
    got = _second(lambda x, p: net(x), x.to(device), net.params, w.to(device), v)
    p64 = net.params.detach().double().cpu().requires_grad_(True)
    want = _second(lambda x, p: reference.mlp(x, p, 5, 3, 16, 2, activation, output_activation), x.double(), p64,
                   w.double(), v.double())
    errors = _errors(got, want)
    print(f"MLP {activation}/{output_activation} on {device}: " + ", ".join(f"{k} {e:.2g}" for k, e in errors.items()))
    assert "d/dparams" in errors and "d/d(dL/dy)" in errors
    if activation != "ReLU":
        assert "d/dx" in errors  # the curvature of a smooth network
    assert all(e < _tolerance(device) for e in errors.values()), errors


def test_encoded_network_second_derivatives_match_reference(device):
    """HashGrid -> MLP (a Sequential): the chain rule across modules, the grid's and the MLP's terms."""
    torch.manual_seed(10)
    encoding = {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2, "log2_hashmap_size": 14,
                "base_resolution": 4, "per_level_scale": 2.0}
    network = {"otype": "FullyFusedMLP", "n_neurons": 16, "n_hidden_layers": 1, "activation": "Softplus",
               "output_activation": "None"}
    model = tcnn.NetworkWithInputEncoding(3, 2, encoding, network, device=device)
    with torch.no_grad():
        model.params.uniform_(-0.5, 0.5)
    n_mlp = reference.mlp_param_count(8, 2, 16, 1)
    x, w, v = torch.rand(400, 3), torch.randn(400, 2), torch.randn(400, 3)

    def ref(x, p):  # the MLP's weights come first in the parameters (matrix region), then the table
        features = reference.hash_grid(x, p[n_mlp:], 4, 2, 14, 4, 2.0)
        return reference.mlp(features, p[:n_mlp], 8, 2, 16, 1, "Softplus", "None")

    got = _second(lambda x, p: model(x), x.to(device), model.params, w.to(device), v)
    p64 = model.params.detach().double().cpu().requires_grad_(True)
    want = _second(ref, x.double(), p64, w.double(), v.double())
    errors = _errors(got, want)
    print(f"HashGrid -> MLP on {device}: " + ", ".join(f"{k} {e:.2g}" for k, e in errors.items()))
    assert set(errors) == {"d/dparams", "d/dx", "d/d(dL/dy)"}
    assert all(e < _tolerance(device) for e in errors.values()), errors


@pytest.mark.parametrize("n_dims,hashed,interpolation", [(3, True, "Linear"), (2, False, "Linear"),
                                                        (3, True, "Smoothstep")])
def test_grid_second_derivatives_match_reference(device, n_dims, hashed, interpolation):
    torch.manual_seed(7)
    config = {"otype": "HashGrid" if hashed else "DenseGrid", "n_levels": 5, "n_features_per_level": 2,
              "log2_hashmap_size": 14, "base_resolution": 6, "per_level_scale": 1.7, "interpolation": interpolation}
    enc = tcnn.Encoding(n_dims, config, device=device)
    with torch.no_grad():
        enc.params.uniform_(-1, 1)
    x = torch.rand(500, n_dims)
    w = torch.randn(500, 10)  # dL/dy of the first backward (a leaf: its gradient is checked too)
    v = torch.randn(500, n_dims)  # the second loss is sum(dL/dx * v)

    def second(fn, x, params, w):
        x = x.clone().requires_grad_(True)
        w = w.clone().requires_grad_(True)
        y = fn(x, params)
        (dx,) = torch.autograd.grad((y * w).sum(), x, create_graph=True)
        return torch.autograd.grad((dx * v.to(dx)).sum(), [params, x, w], allow_unused=True)

    got = second(lambda x, p: enc(x), x.to(device), enc.params, w.to(device))
    p64 = enc.params.detach().double().cpu().requires_grad_(True)
    want = second(lambda x, p: reference.hash_grid(x, p, 5, 2, 14, 6, 1.7, hashed, interpolation == "Smoothstep"),
                  x.double(), p64, w.double())
    errors = _errors(got, want)
    print(f"{config['otype']} {n_dims}D {interpolation} on {device}: " +
          ", ".join(f"{k} {e:.2g}" for k, e in errors.items()))
    assert "d/dparams" in errors and "d/d(dL/dy)" in errors
    if interpolation == "Smoothstep" or n_dims > 1:
        assert "d/dx" in errors  # the cross terms (and smoothstep's diagonal) are not zero
    # fp32 (CPU) or an fp16 table (CUDA) against float64.
    assert all(e < (2e-4 if device.type == "cpu" else 2e-2) for e in errors.values()), errors


def test_eikonal_style_training_lowers_the_gradient_norm_loss(device):
    """A grid + torch loss on |dL/dx| (the eikonal term) trains through the second backward."""
    torch.manual_seed(8)
    enc = tcnn.Encoding(3, {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2, "log2_hashmap_size": 14,
                            "base_resolution": 4, "per_level_scale": 2.0}, device=device)
    with torch.no_grad():
        enc.params.uniform_(-0.5, 0.5)
    opt = torch.optim.Adam(enc.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        x = torch.rand(2048, 3, device=device, requires_grad=True)
        f = enc(x)[:, 0]  # the first feature as a "distance"
        (g,) = torch.autograd.grad(f.sum(), x, create_graph=True)
        loss = ((g.norm(dim=1) - 1) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"eikonal loss on {device}: {losses[0]:.3f} -> {losses[-1]:.4f}")
    assert losses[-1] < 0.25 * losses[0]  # measured 0.224 -> 0.034 on the CPU


def test_modules_without_second_derivatives_say_so(device):
    conv = tcnn.Module(64, {"otype": "Conv2d", "n_input_channels": 1, "n_output_channels": 2, "kernel_size": 3,
                            "padding": 1}, device=device)
    x = torch.rand(4, 64, device=device, requires_grad=True)
    (g,) = torch.autograd.grad(conv(x).sum(), x, create_graph=True)
    with pytest.raises(ValueError, match="Conv2d: second derivatives"):
        g.sum().backward()
    conv(x).sum().backward()  # first derivatives are unaffected
    assert x.grad is not None
