// tessera: train small neural networks fast. See `tessera --help`.
#include <cstdio>
#include <exception>
#include <cmath>
#include <filesystem>

#include <unistd.h>

#include <fmt/format.h>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/core/log.h"
#include "tessera/core/version.h"

namespace tessera::app {

namespace {
CLI::Validator finite_number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not a number";
        if (!std::isfinite(v) || v < 0 || (v == 0 && !allow_zero))
          return std::string("must be a finite number ") + (allow_zero ? "of at least 0" : "above 0") + " (got " +
                 text + ")";
        return "";
      },
      allow_zero ? "NUMBER >= 0" : "NUMBER > 0");
}
}  // namespace

CLI::Validator writable_output_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (fs::is_directory(path, ec)) return "'" + path + "' is a folder";
        // The folder may not exist yet (it is created at the end): its nearest existing
        // ancestor must be a folder we can write in.
        fs::path folder = fs::path(path).parent_path();
        if (folder.empty()) folder = ".";
        while (!fs::exists(folder, ec) && folder != folder.parent_path()) {
          const fs::path up = folder.parent_path();
          folder = up.empty() ? fs::path(".") : up;
        }
        if (!fs::is_directory(folder, ec)) return "'" + folder.string() + "' (on the way to '" + path + "') is not a folder";
        if (::access(folder.c_str(), W_OK) != 0) return "the folder '" + folder.string() + "' is not writable";
        return "";
      },
      "FILE");
}

CLI::Validator finite_positive() { return finite_number_check(false); }
CLI::Validator finite_non_negative() { return finite_number_check(true); }

bool is_opencl_device(const std::string& device) {
  return device == "opencl" || device.rfind("opencl:", 0) == 0;
}

void add_bench_device_option(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device,
                 "cuda: our CUDA kernels vs the NVIDIA library; opencl or opencl:N: our OpenCL kernels vs CLBlast")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) { return v == "cuda" || is_opencl_device(v) ? std::string() : v + " is not cuda, opencl or opencl:N"; },
          "cuda|opencl[:N]"));
}

void add_fit_run_options(CLI::App& cmd, FitRunOptions& o, const std::string& command, const std::string& resume_keeps,
                         const std::string& outputs) {
  cmd.add_option("--snapshot", o.snapshot_path,
                 "where to write the trained model with its optimizer state (default: OUT/model.tsnap)")
      ->check(writable_output_file());
  cmd.add_option("--resume", o.resume_path,
                 fmt::format("continue from a snapshot of {} ({}); the --steps (and --seconds) budget then counts "
                             "from the start of the first run",
                             command, resume_keeps))
      ->check(CLI::ExistingFile);
  add_device_option(cmd, o.device);
  cmd.add_option("--out", o.out_dir, "folder for " + outputs)->capture_default_str();
  cmd.add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd.add_flag("--no-progress", o.no_progress, "no progress bar");
}

void add_device_option(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device,
                 "where to run: auto (CUDA when a GPU is present), cpu, cuda, cuda:N, opencl or opencl:N (tessera "
                 "info lists the devices)")
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v == "auto") return std::string();
            try {
              Device::parse(v);
              return std::string();
            } catch (const Error& e) {
              return std::string(e.what());
            }
          },
          "auto|cpu|cuda[:N]|opencl[:N]"))
      ->capture_default_str();
}

Device choose_device(const std::string& name, bool opencl_runs_it) {
  if (name != "auto") return parse_device(name);
  // CUDA, then (for commands the OpenCL backend runs end to end) an OpenCL GPU, then the
  // CPU. An OpenCL CPU device (PoCL) is never chosen over the CPU backend.
  if (cuda_available()) return Device(DeviceKind::cuda, 0);
  if (opencl_runs_it && built_with_opencl()) {
    const auto devices = opencl_devices();  // GPUs first
    if (!devices.empty() && devices[0].type == "GPU") return Device(DeviceKind::opencl, devices[0].index);
  }
  return Device(DeviceKind::cpu);
}

void ensure_output_folder(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path))
    throw tessera::Error(tessera::format_message("cannot create output folder '{}': {}", path,
                                                 ec ? ec.message() : "a file is in the way"));
}

void write_json_result(const std::string& path, const Json& result) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) ensure_output_folder(parent.string());
  write_file_atomic(path, result.dump(2) + "\n");
}

Json generator_position(const Pcg32& rng) {
  const Pcg32::State p = rng.position();
  return Json::array({p.state, p.inc});
}

void restore_generator(Pcg32& rng, const Json& extra, const std::string& where, const char* command) {
  const Json& at = extra.contains("rng") ? extra.at("rng") : Json();
  TESSERA_CHECK(at.is_array() && at.size() == 2 && at[0].is_number_unsigned() && at[1].is_number_unsigned(),
                "{} was not written by {} (its run record lacks the sample generator's position)", where, command);
  rng.set_position({at[0].get<uint64_t>(), at[1].get<uint64_t>()});
}

}  // namespace tessera::app

int main(int argc, char** argv) {
  CLI::App app{"tessera: train small neural networks fast (tensor-core fully fused MLPs)", "tessera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", tessera::version());
  bool quiet = false, verbose = false;
  CLI::Option* quiet_flag = app.add_flag("-q,--quiet", quiet, "only warnings and errors on stderr");
  app.add_flag("-v,--verbose", verbose,
               "debug lines on stderr too (e.g. a data-parallel rank's collectives still pending)")
      ->excludes(quiet_flag);

  tessera::app::register_info(app);
  CLI::App* fit = app.add_subcommand("fit", "train a network on a built-in or given task");
  fit->require_subcommand(1);
  tessera::app::register_fit_function(*fit);
  tessera::app::register_fit_image(*fit);
  tessera::app::register_fit_denoise(*fit);
  tessera::app::register_fit_sdf(*fit);
  tessera::app::register_nerf(app);
  tessera::app::register_bench(app);

  app.parse_complete_callback([&] {
    if (quiet) tessera::set_log_level(tessera::LogLevel::warning);
    if (verbose) tessera::set_log_level(tessera::LogLevel::debug);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
