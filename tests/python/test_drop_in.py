"""Drop-in for tinycudann: a nerfstudio-style field (nerfstudio_style_field.py, unchanged but
for its import line) learns to render a procedural scene by volume rendering, through
autograd and torch's Adam."""
import math

import torch

from nerfstudio_style_field import TCNNField


def true_field(p, d):
    """A coloured ball of radius 0.25 at the box centre: density and view-dependent colour."""
    r = (p - 0.5).norm(dim=-1, keepdim=True)
    density = 60.0 * torch.sigmoid((0.25 - r) * 80.0)
    rgb = torch.stack([p[..., 0], 1 - p[..., 1], 0.5 + 0.3 * d[..., 2]], dim=-1).clamp(0, 1)
    return density, rgb


def render(field_fn, origins, directions, n_samples=24):
    """Volume rendering of rays through the unit box (near 0, far sqrt(3)), white background."""
    t = torch.linspace(0.0, math.sqrt(3.0), n_samples, device=origins.device)
    delta = t[1] - t[0]
    points = origins[:, None, :] + directions[:, None, :] * t[None, :, None]
    inside = ((points >= 0) & (points <= 1)).all(dim=-1, keepdim=True).float()
    dirs = directions[:, None, :].expand_as(points)
    density, rgb = field_fn(points.clamp(0, 1), dirs)
    alpha = 1 - torch.exp(-density * inside * delta)
    transmittance = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1] + 1e-10], dim=1), dim=1)
    weights = alpha * transmittance
    return (weights * rgb).sum(dim=1) + (1 - weights.sum(dim=1))


def psnr(field, o, d):
    mse = ((render(field, o, d) - render(true_field, o, d)) ** 2).mean().item()
    return -10 * math.log10(mse)


def random_rays(n, gen, device):
    origins = torch.rand(n, 3, generator=gen).to(device) * 0.2 + 0.4 - torch.tensor([0.0, 0.0, 0.9]).to(device)
    directions = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen).to(device) * 0.25 +
                                               torch.tensor([0.0, 0.0, 1.0]).to(device), dim=-1)
    return origins, directions


def test_nerfstudio_style_field_learns_a_scene(device):
    torch.manual_seed(0)
    field = TCNNField().to(device)
    assert {n for n, _ in field.named_parameters()} == {"direction_encoding.params", "mlp_base.params",
                                                        "mlp_head.params"}
    opt = torch.optim.Adam(field.parameters(), lr=1e-2, eps=1e-15)
    gen = torch.Generator().manual_seed(1)
    o, d = random_rays(4096, gen, device)
    with torch.no_grad():
        untrained = psnr(field, o, d)
    for _ in range(120):
        o, d = random_rays(512, gen, device)
        with torch.no_grad():
            target = render(true_field, o, d)
        loss = ((render(field, o, d) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    o, d = random_rays(4096, gen, device)
    with torch.no_grad():
        quality = psnr(field, o, d)
    print(f"nerfstudio-style field on {device}: {untrained:.2f} dB untrained, {quality:.2f} dB after 120 steps")
    assert quality > 30.0
