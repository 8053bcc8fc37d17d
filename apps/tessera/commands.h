#pragma once
// The CLI's subcommands; each file registers one onto the root app.
#include <string>

#include <CLI/CLI.hpp>

#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/rng.h"

namespace tessera::app {

void register_info(CLI::App& root);
void register_fit_function(CLI::App& fit);
void register_fit_image(CLI::App& fit);
void register_fit_denoise(CLI::App& fit);
void register_fit_sdf(CLI::App& fit);
void register_bench(CLI::App& root);
void register_nerf(CLI::App& root);
void register_nerf_prepare(CLI::App& nerf);
void register_bench_encoding(CLI::App& bench);
void register_bench_eikonal(CLI::App& bench);
void register_bench_gemv(CLI::App& bench);
void register_bench_gemm(CLI::App& bench);
void register_bench_conv(CLI::App& bench);
void register_bench_viewer(CLI::App& bench);
void register_bench_data_parallel(CLI::App& bench);

// `bench gemv|gemm|conv --device opencl[:N]`: our OpenCL kernels vs CLBlast on that device
// (apps/tessera/opencl/; a clear error in builds without OpenCL).
struct OpenClBenchOptions {
  std::string device = "cuda", json_path;
  int iterations = 20, warmup = 3;
};
void run_bench_opencl(const std::string& suite, const OpenClBenchOptions& o);
bool is_opencl_device(const std::string& device);
// Adds --device (cuda | opencl[:N]) to a bench subcommand.
void add_bench_device_option(CLI::App& cmd, std::string& device);

// Number checks for options: finite and above 0 (or at least 0). CLI11's PositiveNumber
// lets NaN and inf through.
CLI::Validator finite_positive();
CLI::Validator finite_non_negative();
// A file the command will write at the end: checked before the work starts (its folder
// exists and is writable, the path is not a folder), so a long run is not lost to a typo.
CLI::Validator writable_output_file();

// Adds --device to a subcommand (auto | cpu | cuda[:N] | opencl[:N]).
void add_device_option(CLI::App& cmd, std::string& device);
// What every `fit` command takes besides its own options: where it runs and writes, the
// snapshot it writes and the one it resumes.
struct FitRunOptions {
  std::string device = "auto", out_dir, json_path, snapshot_path, resume_path;
  bool no_progress = false;
};
// Adds --snapshot, --resume, --device, --out, --json and --no-progress. `command` ("fit
// image"), `resume_keeps` (what a resumed run must keep, "same config") and `outputs` (what
// the --out folder receives) go into the help.
void add_fit_run_options(CLI::App& cmd, FitRunOptions& o, const std::string& command, const std::string& resume_keeps,
                         const std::string& outputs);
// The device a --device value names. "auto" is the CLI's policy: CUDA when a GPU is
// present, then an OpenCL GPU when `opencl_runs_it` (every op of the command is on the
// OpenCL backend: fit function, fit denoise), else the CPU. A device this build or
// machine lacks is an error that says why.
Device choose_device(const std::string& name, bool opencl_runs_it = false);
// Creates `path` (and parents) or throws an error naming it; run before long work.
void ensure_output_folder(const std::string& path);
// Writes a command's results as pretty JSON, atomically (no-op for an empty path).
void write_json_result(const std::string& path, const Json& result);

// A host sample generator's position in a run record's extras ("rng"), so a resumed run
// draws the same samples; restoring from a record without one is an error naming `where`
// and the `command` that writes such snapshots.
Json generator_position(const Pcg32& rng);
void restore_generator(Pcg32& rng, const Json& extra, const std::string& where, const char* command);

}  // namespace tessera::app
