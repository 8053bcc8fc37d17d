"""One rank of the DDP tests (test_ddp.py runs two of these, and the single-process baseline):
trains a tessera.torch model with torch SGD on its share of fixed batches and saves params.
Arguments: rank world_size init_file out_path [backend device]; with a backend (gloo, nccl)
the model is wrapped in DDP even for one rank; device "cuda" means cuda:RANK."""
import sys

import torch
import torch.distributed as dist

import tessera.torch as tcnn

GRID = {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2, "log2_hashmap_size": 14,
        "base_resolution": 4, "per_level_scale": 2.0}
MLP = {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 32,
       "n_hidden_layers": 1}


def main(rank, world_size, init_file, out_path, backend=None, device="cpu", steps=20, batch=512):
    if backend is None and world_size > 1:
        backend = "gloo"
    if device == "cuda":
        device = f"cuda:{rank}"
        torch.cuda.set_device(device)
    model = tcnn.NetworkWithInputEncoding(2, 1, GRID, MLP, seed=11, device=device)
    if backend:
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if backend == "nccl" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(5)
    share = batch // world_size
    for _ in range(steps):
        x = torch.rand(batch, 2, generator=gen).to(device)
        y = torch.sin(5 * x[:, :1]) * x[:, 1:]
        mine = slice(rank * share, (rank + 1) * share)
        loss = ((model(x[mine]) - y[mine]) ** 2).mean()  # DDP averages the ranks' gradients
        opt.zero_grad()
        loss.backward()
        opt.step()
    params = (model.module if backend else model).params.detach().float().cpu()
    torch.save(params, out_path)
    if backend:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], *[a or None for a in sys.argv[5:6]], *sys.argv[6:])
