"""scripts/gpu/ncu_per_step.py (the GPU host's per-kernel step profile) on ncu-shaped CSVs
written here: it sums whole steps only and refuses a window that reaches an evaluation."""
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "ncu_per_step.py"
HEADER = '"ID","Kernel Name","Grid Size","Metric Name","Metric Unit","Metric Value"'


def write_csv(path, kernels, unit="nsecond"):
    """kernels: (demangled name as ncu prints it, nanoseconds) in launch order; unit: ncu's
    name for nanoseconds (2025.3 on the GPU host writes "ns")."""
    rows = [f'"{i}","{name}","(1, 1, 1)","gpu__time_duration.sum","{unit}","{ns:,}"'
            for i, (name, ns) in enumerate(kernels)]
    path.write_text("==PROF== Connected to process 1\n" + "\n".join([HEADER] + rows) + "\n")


def run(path):
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("unit", ["nsecond", "ns"])
def test_sums_whole_steps_from_march_to_march(tmp_path, unit):
    step = [("void ns::<unnamed>::march_kernel(NerfScene, unsigned int)", 170_000),
            ("void ns::<unnamed>::grid_forward_kernel<3, 4, __half, 1, 0>(GridLayout, const float *)", 250_000),
            ("void adam_kernel(float *)", 230_000)]
    # A partial step before the first march and after the last is left out; a grid update
    # in one step of two counts half.
    kernels = [("void adam_kernel(float *)", 999_000)] + step + [("void grid_update_kernel()", 40_000)] + step + \
        step[:1] + [("void ns::<unnamed>::grid_forward_kernel<3, 4, __half, 1, 0>(GridLayout)", 999_000)]
    write_csv(tmp_path / "ncu.csv", kernels, unit)
    r = run(tmp_path / "ncu.csv")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("2 whole steps, 7 launches (3.5 a step)")
    table = {}
    for line in lines[1:]:
        fields = line.split(None, 2)  # microseconds, launches a step, name (the sum line: 2 fields)
        table[fields[-1]] = float(fields[0])
    assert table == {"grid_forward_kernel<3, 4, __half, 1, 0>": 250.0, "adam_kernel": 230.0,
                     "march_kernel": 170.0, "grid_update_kernel": 20.0, "sum": 670.0}


def test_refuses_a_window_that_reaches_an_evaluation(tmp_path):
    kernels = [("void march_kernel()", 1000), ("void composite_render_kernel()", 1000), ("void march_kernel()", 1000)]
    write_csv(tmp_path / "ncu.csv", kernels)
    r = run(tmp_path / "ncu.csv")
    assert r.returncode != 0 and "evaluation" in r.stderr


def test_refuses_a_window_without_a_whole_step(tmp_path):
    write_csv(tmp_path / "ncu.csv", [("void march_kernel()", 1000), ("void adam_kernel()", 1000)])
    r = run(tmp_path / "ncu.csv")
    assert r.returncode != 0 and "--launch-count" in r.stderr
    (tmp_path / "empty.csv").write_text("==PROF== No kernels were profiled.\n")
    r = run(tmp_path / "empty.csv")
    assert r.returncode != 0 and "no ncu CSV header" in r.stderr
