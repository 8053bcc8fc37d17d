"""A radiance field written the way nerfstudio's nerfacto and threestudio write theirs against
tinycudann: a hash-grid density MLP (tcnn.NetworkWithInputEncoding), a SphericalHarmonics
direction encoding (tcnn.Encoding), a colour head (tcnn.Network), outputs split, cast with
.to() / .float(), trunc_exp on the density. Only the import line differs from such code."""
import torch
from torch.autograd import Function
from torch.cuda.amp import custom_bwd, custom_fwd

import tessera.torch as tcnn  # was: import tinycudann as tcnn


class _TruncExp(Function):  # nerfstudio's trunc_exp
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    @custom_bwd
    def backward(ctx, g):
        x = ctx.saved_tensors[0]
        return g * torch.exp(x.clamp(-15, 15))


trunc_exp = _TruncExp.apply


class TCNNField(torch.nn.Module):
    def __init__(self, num_levels=8, log2_hashmap_size=15, features_per_level=2, base_res=16, max_res=256,
                 hidden_dim=64, geo_feat_dim=15, hidden_dim_color=64, num_layers_color=3):
        super().__init__()
        self.geo_feat_dim = geo_feat_dim
        growth_factor = (max_res / base_res) ** (1 / (num_levels - 1))
        self.direction_encoding = tcnn.Encoding(
            n_input_dims=3, encoding_config={"otype": "SphericalHarmonics", "degree": 4})
        self.mlp_base = tcnn.NetworkWithInputEncoding(
            n_input_dims=3,
            n_output_dims=1 + self.geo_feat_dim,
            encoding_config={"otype": "HashGrid", "n_levels": num_levels, "n_features_per_level": features_per_level,
                             "log2_hashmap_size": log2_hashmap_size, "base_resolution": base_res,
                             "per_level_scale": growth_factor},
            network_config={"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                            "n_neurons": hidden_dim, "n_hidden_layers": 1},
        )
        self.mlp_head = tcnn.Network(
            n_input_dims=self.direction_encoding.n_output_dims + self.geo_feat_dim,
            n_output_dims=3,
            network_config={"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "Sigmoid",
                            "n_neurons": hidden_dim_color, "n_hidden_layers": num_layers_color - 1},
        )

    def get_density(self, positions):
        """positions [..., 3] in [0, 1]."""
        positions_flat = positions.view(-1, 3)
        h = self.mlp_base(positions_flat).view(*positions.shape[:-1], -1)
        density_before_activation, base_mlp_out = torch.split(h, [1, self.geo_feat_dim], dim=-1)
        density = trunc_exp(density_before_activation.to(positions))
        return density, base_mlp_out

    def get_outputs(self, directions, density_embedding):
        """directions [..., 3] unit vectors."""
        outputs_shape = directions.shape[:-1]
        directions_flat = ((directions + 1.0) / 2.0).view(-1, 3)
        d = self.direction_encoding(directions_flat)
        h = torch.cat([d, density_embedding.view(-1, self.geo_feat_dim)], dim=-1)
        rgb = self.mlp_head(h).view(*outputs_shape, -1).to(directions)
        return rgb.float()

    def forward(self, positions, directions):
        density, embedding = self.get_density(positions)
        return density, self.get_outputs(directions, embedding)
