"""tessera.Trainer from numpy: from_config, steps, inference, params, snapshots, errors."""
import numpy as np
import pytest

import tessera

CONFIG = {
    "encoding": {"otype": "HashGrid", "n_levels": 8, "n_features_per_level": 2, "log2_hashmap_size": 15,
                 "base_resolution": 4, "per_level_scale": 1.5},
    "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
                "n_hidden_layers": 2},
    "loss": {"otype": "L2"},
    "optimizer": {"otype": "Adam", "learning_rate": 1e-2},
}


def f(x):
    return np.sin(6 * x[:, :1]) * np.cos(5 * x[:, 1:2])


@pytest.fixture()
def device_name(device):
    return str(device) if device.type == "cpu" else f"cuda:{device.index or 0}"


def test_fits_a_function_and_resumes(device_name, tmp_path):
    assert "cpu" in tessera.devices() and tessera.version()
    trainer = tessera.Trainer.from_config(CONFIG, 2, 1, device=device_name, seed=3)
    assert trainer.n_input_dims == 2 and trainer.n_output_dims == 1 and trainer.n_params == trainer.params.size
    rng = np.random.default_rng(0)
    batches = [rng.random((2048, 2), dtype=np.float32) for _ in range(300)]
    first = trainer.training_step(batches[0], f(batches[0]))
    for x in batches[1:150]:
        trainer.training_step(x, f(x))
    trainer.save(tmp_path / "half.snapshot")
    for x in batches[150:]:
        loss = trainer.training_step(x, f(x))
    assert trainer.steps == 300 and loss < first * 0.05
    test = rng.random((5000, 2))  # float64 input is converted
    mse = float(np.mean((trainer.inference(test) - f(test)) ** 2))
    assert mse < 2e-3, mse
    final = trainer.params

    trainer.load(tmp_path / "half.snapshot")
    assert trainer.steps == 150
    for x in batches[150:]:
        trainer.training_step(x, f(x))
    if device_name == "cpu":  # the same steps bit for bit
        np.testing.assert_array_equal(trainer.params, final)
    else:  # CUDA's atomics add in any order: the same fit up to that
        resumed_mse = float(np.mean((trainer.inference(test) - f(test)) ** 2))
        assert resumed_mse < 2e-3 and 0.5 < resumed_mse / mse < 2.0, (resumed_mse, mse)

    again = tessera.Trainer.from_config(trainer.config, 2, 1, device=device_name)
    again.params = final
    trainer.params = final
    np.testing.assert_allclose(again.inference(test), trainer.inference(test), rtol=1e-6, atol=1e-6)


def test_a_budget_schedule_follows_the_progress_it_is_given(device_name):
    # BudgetDecay(0.5 -> 0.01): at the end of the budget Adam's rate is 1% of the base, so
    # one step from the same weights and batch moves them ~100x less.
    config = dict(CONFIG, optimizer={"otype": "BudgetDecay", "decay_start": 0.5, "final_factor": 0.01,
                                     "nested": {"otype": "Adam", "learning_rate": 1e-2}})
    rng = np.random.default_rng(1)
    x = rng.random((2048, 2), dtype=np.float32)
    moved = {}
    for progress in (0.25, 1.0):
        trainer = tessera.Trainer.from_config(config, 2, 1, device=device_name, seed=5)
        before = trainer.params
        trainer.set_progress(progress)
        trainer.training_step(x, f(x))
        moved[progress] = float(np.abs(trainer.params - before).max())
    assert moved[0.25] > 0 and 50 < moved[0.25] / moved[1.0] < 200, moved
    with pytest.raises(ValueError, match="progress"):
        trainer.set_progress(float("nan"))


def test_errors(device_name, tmp_path):
    trainer = tessera.Trainer.from_config(CONFIG, 2, 1, device=device_name)
    with pytest.raises(ValueError, match=r"\[batch, 2\]"):
        trainer.training_step(np.zeros((4, 3)), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="rows"):
        trainer.training_step(np.zeros((4, 2)), np.zeros((5, 1)))
    with pytest.raises(TypeError, match="numbers"):
        trainer.inference(np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="not-a-snapshot"):
        trainer.load(tmp_path / "not-a-snapshot")
    with pytest.raises(ValueError, match="optimizer"):
        tessera.Trainer.from_config(dict(CONFIG, optimizer={"otype": "Adamm"}), 2, 1, device=device_name)
    with pytest.raises(ValueError, match="cuda:9"):
        tessera.Trainer.from_config(CONFIG, 2, 1, device="cuda:9")


def test_info_reports_the_build_and_each_gpu(device_name):
    info = tessera.info()
    assert info["version"] == tessera.version() and info["backends"]["cpu"]
    gpus = [d for d in tessera.devices() if d.startswith("cuda:")]
    assert len(info["cuda_devices"]) == len(gpus)
    for gpu in info["cuda_devices"]:
        kernels = {k["op"]: k["kernel"] for k in gpu["kernels"]}
        # Which code of the build this GPU runs, and the fused MLP's kernel on it.
        assert "machine code" in kernels["code"] or "PTX" in kernels["code"], kernels["code"]
        assert "mma" in kernels["fully fused MLP w64 training"].lower(), kernels
