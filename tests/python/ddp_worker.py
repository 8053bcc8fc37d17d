"""One rank of the DDP test (test_ddp.py runs two of these, and the single-process baseline):
trains a tessera.torch model with torch SGD on its share of fixed batches and saves params."""
import sys

import torch
import torch.distributed as dist

import tessera.torch as tcnn

GRID = {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2, "log2_hashmap_size": 14,
        "base_resolution": 4, "per_level_scale": 2.0}
MLP = {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 32,
       "n_hidden_layers": 1}


def main(rank, world_size, init_file, out_path, steps=20, batch=512):
    model = tcnn.NetworkWithInputEncoding(2, 1, GRID, MLP, seed=11, device="cpu")
    if world_size > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(5)
    share = batch // world_size
    for _ in range(steps):
        x = torch.rand(batch, 2, generator=gen)
        y = torch.sin(5 * x[:, :1]) * x[:, 1:]
        mine = slice(rank * share, (rank + 1) * share)
        loss = ((model(x[mine]) - y[mine]) ** 2).mean()  # DDP averages the ranks' gradients
        opt.zero_grad()
        loss.backward()
        opt.step()
    params = (model.module if world_size > 1 else model).params.detach()
    torch.save(params, out_path)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
