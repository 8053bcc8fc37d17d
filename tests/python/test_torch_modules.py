"""tessera.torch modules against plain PyTorch references holding the same weights: forward,
gradients to the input and to params, for networks, encodings and the two together."""
import pytest
import torch

import reference
import tessera.torch as tcnn

# Measured worst relative errors (rel_err): CPU fp32 <= 2.2e-5 (grid positions in fp32 at the
# finest levels); H200 fp16 tensor cores: see the GPU run in BENCHMARKS.md.
def tolerance(device, fp32=1e-4, fp16=2e-2):
    return fp16 if device.type == "cuda" else fp32


def rel_err(a, b):
    """|a - b| / |b| (Frobenius): robust to the few ReLU units an fp16 forward puts on the
    other side of zero, whose derivatives then differ entirely."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-12)).item()


def compare(module, ref_fn, x, device, n_out):
    """Forward, dL/dx and dL/dparams of module against ref_fn(x64, params64) for L = sum(y * w)."""
    x = x.to(device).requires_grad_(True)
    y = module(x)
    assert y.dtype == torch.float32 and y.shape == (x.shape[0], n_out)
    w = torch.randn_like(y)
    dx, dparams = torch.autograd.grad((y * w).sum(), [x, module.params])

    x64 = x.detach().double().cpu().requires_grad_(True)
    p64 = module.params.detach().double().cpu().requires_grad_(True)
    y64 = ref_fn(x64, p64)
    dx64, dp64 = torch.autograd.grad((y64 * w.double().cpu()).sum(), [x64, p64], allow_unused=True)
    dp64 = torch.zeros_like(p64) if dp64 is None else dp64
    tol = tolerance(device)
    errors = {"forward": rel_err(y.cpu(), y64),
              "dL/dparams": rel_err(dparams.cpu(), dp64) if dp64.numel() else 0.0,
              "dL/dx": rel_err(dx.cpu(), dx64) if dx64.abs().max() > 0 else 0.0}
    print(f"{type(module).__name__} on {device}: " + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))
    assert errors["forward"] < tol and errors["dL/dparams"] < 2 * tol and errors["dL/dx"] < 2 * tol, errors


@pytest.mark.parametrize("activation,output_activation,width,n_hidden", [
    ("ReLU", "None", 64, 2), ("Tanh", "Sigmoid", 32, 1), ("Sigmoid", "None", 16, 3), ("Softplus", "Exponential", 64, 1),
])
def test_network_matches_reference(device, activation, output_activation, width, n_hidden):
    torch.manual_seed(0)
    config = {"otype": "FullyFusedMLP", "activation": activation, "output_activation": output_activation,
              "n_neurons": width, "n_hidden_layers": n_hidden}
    net = tcnn.Network(5, 3, config, device=device)
    assert net.params.numel() == reference.mlp_param_count(5, 3, width, n_hidden)
    assert net.params.dtype == torch.float32 and net.params.device.type == device.type
    x = torch.rand(1000, 5) * 2 - 1  # not a multiple of 128: any batch size works
    compare(net, lambda x, p: reference.mlp(x, p, 5, 3, width, n_hidden, activation, output_activation), x, device, 3)


@pytest.mark.parametrize("n_dims,hashed", [(2, True), (3, True), (3, False)])
def test_grid_encoding_matches_reference(device, n_dims, hashed):
    torch.manual_seed(1)
    config = {"otype": "HashGrid" if hashed else "DenseGrid", "n_levels": 6, "n_features_per_level": 2,
              "log2_hashmap_size": 14, "base_resolution": 8, "per_level_scale": 1.6}
    enc = tcnn.Encoding(n_dims, config, device=device)
    assert enc.n_output_dims == 12
    with torch.no_grad():
        enc.params.uniform_(-1, 1)  # larger than the initial 1e-4 values, so errors show
    x = torch.rand(777, n_dims)
    compare(enc, lambda x, p: reference.hash_grid(x, p, 6, 2, 14, 8, 1.6, hashed), x, device, 12)


def test_frequency_and_sh_match_reference(device):
    torch.manual_seed(2)
    freq = tcnn.Encoding(3, {"otype": "Frequency", "n_frequencies": 4}, device=device)
    compare(freq, lambda x, p: reference.frequency(x, 4), torch.rand(300, 3), device, 24)
    sh = tcnn.Encoding(3, {"otype": "SphericalHarmonics", "degree": 4}, device=device)
    d = torch.nn.functional.normalize(torch.randn(300, 3), dim=1) * 0.5 + 0.5
    compare(sh, lambda x, p: reference.spherical_harmonics_degree4(x), d, device, 16)


def test_network_with_input_encoding_matches_reference(device):
    torch.manual_seed(3)
    enc = {"otype": "HashGrid", "n_levels": 8, "n_features_per_level": 2, "log2_hashmap_size": 15,
           "base_resolution": 16, "per_level_scale": 1.5}
    net = {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
           "n_hidden_layers": 2}
    model = tcnn.NetworkWithInputEncoding(3, 4, enc, net, device=device)
    n_net = reference.mlp_param_count(16, 4, 64, 2)
    with torch.no_grad():
        model.params[n_net:].uniform_(-1, 1)

    def ref(x, p):  # tinycudann's layout: the network's matrices first, then the tables
        features = reference.hash_grid(x, p[n_net:], 8, 2, 15, 16, 1.5)
        return reference.mlp(features, p[:n_net], 16, 4, 64, 2)

    compare(model, ref, torch.rand(2000, 3), device, 4)


def test_non_contiguous_and_batched_inputs(device):
    torch.manual_seed(4)
    net = tcnn.Network(3, 2, {"otype": "FullyFusedMLP", "n_neurons": 32, "n_hidden_layers": 1}, device=device)
    wide = torch.rand(100, 7, device=device)
    x = wide[:, 1:4]  # a column slice: rows are strided
    assert not x.is_contiguous()
    torch.testing.assert_close(net(x), net(x.contiguous()))
    batched = torch.rand(4, 25, 3, device=device)
    assert net(batched).shape == (4, 25, 2)
    torch.testing.assert_close(net(batched).reshape(100, 2), net(batched.reshape(100, 3)))
    assert net(torch.rand(0, 3, device=device)).shape == (0, 2)
    assert net(x.double()).dtype == torch.float32  # other float types are taken as fp32


def test_half_output(device):
    enc = tcnn.Encoding(2, {"otype": "Frequency", "n_frequencies": 2}, dtype=torch.float16, device=device)
    x = torch.rand(50, 2, device=device, requires_grad=True)
    y = enc(x)
    assert y.dtype == torch.float16
    y.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32


def test_module_twice_in_one_graph(device):
    """Two forwards before one backward: the older context is recomputed, gradients add up."""
    torch.manual_seed(5)
    net = tcnn.Network(2, 1, {"otype": "FullyFusedMLP", "n_neurons": 16, "n_hidden_layers": 1}, device=device)
    a, b = torch.rand(64, 2, device=device), torch.rand(64, 2, device=device)
    (net(a).sum() + 2 * net(b).sum()).backward()
    both = net.params.grad.clone()
    net.params.grad = None
    net(a).sum().backward()
    (2 * net(b).sum()).backward()
    torch.testing.assert_close(both, net.params.grad, rtol=tolerance(device), atol=1e-6)


def test_params_changed_by_torch_are_seen(device):
    net = tcnn.Network(2, 1, {"otype": "FullyFusedMLP", "n_neurons": 16, "n_hidden_layers": 1}, device=device)
    x = torch.rand(32, 2, device=device)
    before = net(x).detach().clone()
    with torch.no_grad():
        net.params.mul_(2.0)  # in place: one ReLU layer and a linear output scale by 4
    torch.testing.assert_close(net(x).detach(), before * 4, rtol=tolerance(device, 1e-5, 1e-2), atol=1e-5)
