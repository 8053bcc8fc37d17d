"""Plain PyTorch versions of tessera's modules, computed in float64 from the same flat
parameter vector (tinycudann's layout), for the tests to compare against."""
import math

import numpy as np
import torch

PRIMES = (1, 2654435761, 805459861, 3674653429)


def _round16(n):
    return (n + 15) // 16 * 16


def _activation(name, z):
    name = name.lower()
    if name == "none":
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "tanh":
        return torch.tanh(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    if name == "softplus":
        return torch.nn.functional.softplus(z)
    if name == "exponential":
        return torch.exp(z)
    if name == "leakyrelu":
        return torch.nn.functional.leaky_relu(z, 0.01)
    if name == "silu":
        return torch.nn.functional.silu(z)
    if name == "sine":
        return torch.sin(z)
    raise ValueError(name)


def mlp(x, params, n_input, n_output, width, n_hidden, activation="ReLU", output_activation="None"):
    """FullyFusedMLP: no biases; layer l's matrix [out_padded, in_padded] row-major."""
    dims_in = [_round16(n_input)] + [width] * n_hidden
    dims_out = [width] * n_hidden + [_round16(n_output)]
    logical_in = [n_input] + [width] * n_hidden
    logical_out = [width] * n_hidden + [n_output]
    offset, h = 0, x
    for layer in range(n_hidden + 1):
        size = dims_in[layer] * dims_out[layer]
        w = params[offset:offset + size].view(dims_out[layer], dims_in[layer])
        w = w[:logical_out[layer], :logical_in[layer]]
        offset += size
        h = h @ w.t()
        h = _activation(activation if layer < n_hidden else output_activation, h)
    return h


def mlp_param_count(n_input, n_output, width, n_hidden):
    dims_in = [_round16(n_input)] + [width] * n_hidden
    dims_out = [width] * n_hidden + [_round16(n_output)]
    return sum(i * o for i, o in zip(dims_in, dims_out))


def grid_layout(n_dims, n_levels, log2_hashmap_size, base_resolution, per_level_scale, hashed=True):
    """Per level (scale, resolution, size, offset, dense), with tiny-cuda-nn's float arithmetic."""
    levels, offset = [], 0
    table = 1 << log2_hashmap_size
    for level in range(n_levels):
        scale = np.float32(np.exp2(np.float32(level) * np.log2(np.float32(per_level_scale)))) * \
            np.float32(base_resolution) - np.float32(1.0)
        resolution = int(math.ceil(float(scale))) + 1
        dense_entries = resolution ** n_dims
        entries = (dense_entries + 7) // 8 * 8
        if hashed:
            entries = min(entries, table)
        levels.append((float(scale), resolution, entries, offset, dense_entries <= entries))
        offset += entries
    return levels, offset


def hash_grid(x, params, n_levels, n_features, log2_hashmap_size, base_resolution, per_level_scale, hashed=True,
              smoothstep=False):
    """HashGrid / DenseGrid, linear or smoothstep interpolation; x [batch, d] in [0, 1]."""
    batch, n_dims = x.shape
    levels, total = grid_layout(n_dims, n_levels, log2_hashmap_size, base_resolution, per_level_scale, hashed)
    table = params.view(total, n_features)
    outputs = []
    for scale, resolution, size, offset, dense in levels:
        # Positions in fp32 as tessera computes them, so both pick the same cell near a border.
        pos = (x.float() * np.float32(scale) + 0.5).to(x.dtype)
        cell = torch.floor(pos)
        frac = pos - cell
        if smoothstep:
            frac = frac * frac * (3 - 2 * frac)
        cell = cell.long()
        acc = torch.zeros(batch, n_features, dtype=x.dtype, device=x.device)
        for corner in range(1 << n_dims):
            weight = torch.ones(batch, dtype=x.dtype, device=x.device)
            index = torch.zeros(batch, dtype=torch.long, device=x.device)
            stride = 1
            for d in range(n_dims):
                upper = (corner >> d) & 1
                vertex = cell[:, d] + upper
                weight = weight * (frac[:, d] if upper else 1 - frac[:, d])
                if dense:
                    index = index + vertex * stride
                    stride *= resolution
                else:
                    index = index ^ ((vertex * PRIMES[d]) & 0xFFFFFFFF)
            index = index & (size - 1) if size & (size - 1) == 0 else torch.where(index < size, index, index % size)
            acc = acc + weight[:, None] * table[offset + index]
        outputs.append(acc)
    return torch.cat(outputs, dim=1)


def frequency(x, n_frequencies):
    """tiny-cuda-nn's Frequency: per dim, per frequency, sin then cos of pi 2^f x."""
    batch, n_dims = x.shape
    cols = []
    for d in range(n_dims):
        for f in range(n_frequencies):
            arg = x[:, d] * (math.pi * 2 ** f)
            cols.extend([torch.sin(arg), torch.cos(arg)])
    return torch.stack(cols, dim=1)


def spherical_harmonics_degree4(d):
    """Real SH up to degree 4 (16 values) of directions mapped from [0, 1] to [-1, 1], as tcnn."""
    x, y, z = (d * 2 - 1).unbind(1)
    xy, xz, yz, x2, y2, z2 = x * y, x * z, y * z, x * x, y * y, z * z
    return torch.stack([
        torch.full_like(x, 0.28209479177387814),
        -0.48860251190291987 * y, 0.48860251190291987 * z, -0.48860251190291987 * x,
        1.0925484305920792 * xy, -1.0925484305920792 * yz, 0.94617469575755997 * z2 - 0.31539156525251999,
        -1.0925484305920792 * xz, 0.54627421529603959 * x2 - 0.54627421529603959 * y2,
        0.59004358992664352 * y * (-3.0 * x2 + y2), 2.8906114426405538 * xy * z,
        0.45704579946446572 * y * (1.0 - 5.0 * z2), 0.3731763325901154 * z * (5.0 * z2 - 3.0),
        0.45704579946446572 * x * (1.0 - 5.0 * z2), 1.4453057213202769 * z * (x2 - y2),
        0.59004358992664352 * x * (-x2 + 3.0 * y2),
    ], dim=1)
