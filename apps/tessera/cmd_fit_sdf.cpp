// `tessera fit sdf MESH`: learns a mesh's signed distance as (x, y, z) -> distance with a
// hash grid + fully fused MLP (instant-ngp's SDF primitive). The mesh's winding is made
// consistent and outward first (geometry/mesh_repair.h), whatever the file's convention, and
// a mesh with no inside is refused before training. Training samples (uniform in the
// unit cube and near the surface, their signed distance by closest point and generalized
// winding number: geometry/sdf.h) are made once on the host into a pool on the device; each
// step trains on the pool's next slice. At the evaluation marks the zero level set is
// extracted (marching tetrahedra) and compared with the input: Chamfer distance and normal
// consistency, and the eikonal residual (mean | |grad f| - 1 |: a true distance has 1).
// --eikonal W adds W * mean (|grad f| - 1)^2 to the loss, trained through the model's second
// derivatives. Outputs: the mesh (PLY), a normals rendering (PNG), the curve (CSV), a snapshot.
#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "image_io.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/progress.h"
#include "tessera/core/timer.h"
#include "tessera/geometry/mesh_repair.h"
#include "tessera/geometry/sdf.h"
#include "tessera/nn/training_session.h"
#include "tessera/nn/training_snapshot.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::app {

namespace {

// instant-ngp's SDF configuration (configs/sdf/base.json: hash grid to 2048^3, 64-wide MLP)
// with an L1 loss on the distance and the budget-following schedule.
constexpr const char* kDefaultConfig = R"({
  "loss": {"otype": "L1"},
  "optimizer": {"otype": "BudgetDecay", "decay_start": 0.5, "final_factor": 0.03,
                "nested": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-15,
                           "l2_reg": 1e-6}},
  "encoding": {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
               "base_resolution": 16, "per_level_scale": 1.3819},
  "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
              "n_hidden_layers": 2}
})";

const std::vector<double> kMilestones = {1, 2, 5, 10, 20, 30, 60, 120, 300, 600};

struct FitSdfOptions {
  std::string mesh_path, config_path;
  uint64_t steps = 0;
  double seconds = 0;
  uint32_t log2_batch = 0;     // 0: 2^18 on CUDA, 2^14 on the CPU
  uint32_t log2_samples = 0;   // pool: 0: 2^22 on CUDA, 2^18 on the CPU
  uint32_t resolution = 0;     // mesh extraction lattice: 0: 256 on CUDA, 96 on the CPU
  uint32_t image_size = 0;     // normals rendering: 0: 512 on CUDA, 256 on the CPU
  uint64_t seed = 1337;
  float eikonal = 0;           // weight of the eikonal term (0: none)
  FitRunOptions run{.out_dir = "fit_sdf_out"};
};

// mean | |grad f| - 1 | over `points` [n, 3] on the device: the model's input gradient of
// its output's sum (its parameter gradients are overwritten, as the next step does anyway).
double eikonal_residual(nn::ModelTrainer& t, nn::ConstView points, nn::ConstView ones) {
  const size_t n = points.rows();
  const Device dev = t.model().device();
  Buffer<float> f(dev, n), g(dev, n * 3);
  nn::Module& m = t.model();
  auto ctx = m.forward(points, f.matrix(n, 1));
  m.backward(*ctx, points, ones, g.matrix(n, 3), nn::GradientMode::overwrite);
  const std::vector<float> host = g.to_host(t.stream());
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += std::fabs(std::sqrt(double(host[3 * i]) * host[3 * i] + double(host[3 * i + 1]) * host[3 * i + 1] +
                               double(host[3 * i + 2]) * host[3 * i + 2]) -
                     1.0);
  return sum / double(n);
}

// The model's distance at many unit-cube points, in chunks through device buffers.
class SdfField {
 public:
  SdfField(nn::ModelTrainer& t, Device dev) : t_(t), in_(dev, kChunk * 3), out_(dev, kChunk) {}
  std::vector<float> operator()(const std::vector<float>& points) {
    const size_t n = points.size() / 3;
    std::vector<float> d(n);
    for (size_t first = 0; first < n; first += kChunk) {
      const size_t m = std::min(kChunk, n - first);
      in_.copy_from_host(points.data() + first * 3, m * 3);
      t_.inference(in_.matrix(m, 3), out_.matrix(m, 1));
      out_.copy_to_host(d.data() + first, m);
    }
    return d;
  }

 private:
  static constexpr size_t kChunk = size_t(1) << 20;
  nn::ModelTrainer& t_;
  Buffer<float> in_, out_;
};

// The zero level set on a res^3 lattice over the unit cube, in the mesh's coordinates.
geometry::Mesh extract_surface(SdfField& field, uint32_t res, const geometry::UnitCubeMap& map) {
  std::vector<float> lattice(size_t(res) * res * res * 3);
  for (size_t i = 0; i < size_t(res) * res * res; ++i) {
    lattice[3 * i] = float(i % res) / float(res - 1);
    lattice[3 * i + 1] = float(i / res % res) / float(res - 1);
    lattice[3 * i + 2] = float(i / res / res) / float(res - 1);
  }
  std::vector<float> inside = field(lattice);
  for (float& v : inside) v = -v;  // extract_isosurface's inside is above the threshold
  geometry::Mesh m = geometry::extract_isosurface(inside, res, 0.0f, {{0, 0, 0}, {1, 1, 1}});
  for (size_t v = 0; v < m.n_vertices(); ++v) {
    const geometry::Point p = map.from_unit({m.positions[3 * v], m.positions[3 * v + 1], m.positions[3 * v + 2]});
    std::copy(p.begin(), p.end(), m.positions.begin() + 3 * v);
  }
  return m;
}

// The learned surface seen from a corner of the cube, coloured by its normal (0.5 * (n + 1)),
// by sphere tracing the learned distance; white where a ray misses. Each iteration evaluates
// the rays still marching only.
std::vector<float> render_normals(SdfField& field, uint32_t size) {
  using ops::nerf::Vec3;
  const Vec3 eye{1.6f, 1.3f, 1.9f};
  const Vec3 fwd = ops::nerf::normalized(Vec3{0.5f, 0.5f, 0.5f} - eye);
  const Vec3 right = ops::nerf::normalized(cross(fwd, Vec3{0, 1, 0})), up = cross(right, fwd);
  const size_t n = size_t(size) * size;
  const float half = std::tan(0.5f * 40.0f * float(M_PI) / 180.0f);
  std::vector<Vec3> dir(n);
  std::vector<float> t(n, 0.0f);
  std::vector<uint32_t> marching(n), hits;
  for (uint32_t p = 0; p < n; ++p) {
    const float sx = (2.0f * (float(p % size) + 0.5f) / float(size) - 1.0f) * half;
    const float sy = (1.0f - 2.0f * (float(p / size) + 0.5f) / float(size)) * half;
    dir[p] = ops::nerf::normalized(fwd + sx * right + sy * up);
    marching[p] = p;
  }
  auto at = [&](uint32_t p, float offset, int axis) {
    Vec3 q = eye + t[p] * dir[p];
    (axis == 0 ? q.x : axis == 1 ? q.y : q.z) += offset;
    return q;
  };
  std::vector<float> points;
  for (int iteration = 0; iteration < 128 && !marching.empty(); ++iteration) {
    points.resize(marching.size() * 3);
    for (size_t i = 0; i < marching.size(); ++i) {
      const Vec3 q = at(marching[i], 0, 0);
      for (int k = 0; k < 3; ++k) points[3 * i + k] = std::clamp(q[k], 0.0f, 1.0f);
    }
    const std::vector<float> d = field(points);
    size_t kept = 0;
    for (size_t i = 0; i < marching.size(); ++i) {
      const uint32_t p = marching[i];
      const Vec3 q = at(p, 0, 0);
      const bool in_cube = q.x >= 0 && q.x <= 1 && q.y >= 0 && q.y <= 1 && q.z >= 0 && q.z <= 1;
      if (in_cube && d[i] < 2e-4f) {
        hits.push_back(p);
      } else if (t[p] <= 4.0f) {
        t[p] += in_cube ? std::max(0.9f * d[i], 1e-4f) : 0.02f;  // outside the cube: approach it
        marching[kept++] = p;
      }
    }
    marching.resize(kept);
  }
  // Normals by central differences of the field at the hit points.
  const float h = 1.0f / 1024;
  std::vector<float> probes(hits.size() * 18);
  for (size_t i = 0; i < hits.size(); ++i)
    for (int a = 0; a < 3; ++a)
      for (int s = 0; s < 2; ++s) {
        const Vec3 q = at(hits[i], s ? h : -h, a);
        for (int k = 0; k < 3; ++k) probes[i * 18 + (a * 2 + s) * 3 + k] = q[k];
      }
  const std::vector<float> f = field(probes);
  std::vector<float> rgb(n * 3, 1.0f);
  for (size_t i = 0; i < hits.size(); ++i) {
    const Vec3 g{f[i * 6 + 1] - f[i * 6], f[i * 6 + 3] - f[i * 6 + 2], f[i * 6 + 5] - f[i * 6 + 4]};
    const float len = std::sqrt(dot(g, g));
    for (int a = 0; a < 3; ++a) rgb[3 * hits[i] + a] = len > 0 ? 0.5f * (g[a] / len + 1.0f) : 0.5f;
  }
  return rgb;
}

// A distance field needs both sides of a surface: without samples inside (an open sheet, a
// surface with wide holes, no enclosed volume) there is no zero level set to learn, and the
// run would find that out only when its budget is spent. "Inside" is the winding number
// above 0.5; an open sheet bent into a shallow trough reaches a little above 0.5 in its
// hollows, so enclosing needs samples clearly inside (above 0.75; a closed mesh's interior
// is at 1, a bowl's deep inside at 0.8-0.9), counted at a spread of the pool's samples.
void check_both_sides(const std::string& path, const geometry::MeshQueries& queries, const geometry::UnitCubeMap& map,
                      const geometry::MeshRepair& repair, const std::vector<float>& positions,
                      const std::vector<float>& distances) {
  constexpr double kMinFraction = 0.01;  // a closed mesh gives 15-50% (half its near-surface samples)
  const size_t samples = distances.size(), stride = std::max<size_t>(1, samples / 4096);
  const size_t inside = size_t(std::count_if(distances.begin(), distances.end(), [](float d) { return d < 0; }));
  size_t probes = 0, clearly_inside = 0;
  for (size_t i = 0; i < samples; i += stride, ++probes)
    clearly_inside += queries.winding_number(map.from_unit({positions[3 * i], positions[3 * i + 1],
                                                            positions[3 * i + 2]})) > 0.75;
  const double fraction = double(clearly_inside) / double(probes);
  const std::string why = repair.open_edges
                              ? fmt::format("it has {} open edges: an open sheet, or a surface with holes too wide "
                                            "for the winding number to close",
                                            repair.open_edges)
                              : std::string("it is closed, so it is flat or tiny against its bounding box");
  TESSERA_CHECK(fraction >= kMinFraction,
                "fit sdf: {} encloses no volume: {} of {} samples ({:.2f}%) are clearly inside it (winding number "
                "above 0.75); {}. Close the surface (fill its holes) or give it a thickness",
                path, clearly_inside, probes, 100.0 * fraction, why);
  TESSERA_CHECK(double(samples - inside) >= kMinFraction * double(samples),
                "fit sdf: {}: {} of {} samples are inside the mesh, every one on the same side: nothing is outside it "
                "in its own bounding box ({})",
                path, inside, samples, repair.summary());
}

void run(const FitSdfOptions& o) {
  const Device dev = choose_device(o.run.device);
  const bool cuda = dev.kind == DeviceKind::cuda;
  TESSERA_CHECK(o.eikonal == 0 || backend_for(dev).supports<ops::MlpBackwardBackward>(),
                "fit sdf --eikonal: the MLP's second derivatives are not on {} (the CPU and CUDA have them): use "
                "another --device, or train without --eikonal", to_string(dev));
  Stopwatch load_clock;
  geometry::Mesh mesh = geometry::load_mesh(o.mesh_path);
  // Inside is where the winding number is 1: the file's winding, whichever it is, made
  // consistent and outward first.
  const geometry::MeshRepair repair = geometry::orient_outward(mesh, o.mesh_path);
  const geometry::MeshQueries queries(mesh);
  const geometry::UnitCubeMap map = geometry::unit_cube_map(queries);
  const Json config = o.config_path.empty() ? parse_json(kDefaultConfig, "built-in config") : load_json_file(o.config_path);
  auto trainer = nn::ModelTrainer::from_config(config, 3, 1, dev, o.seed);
  nn::RunRecord resumed;
  if (!o.run.resume_path.empty())
    resumed = nn::RunRecord::from_json(nn::load_training_snapshot(*trainer, o.run.resume_path), o.run.resume_path);
  resumed.steps = trainer->steps();
  const uint64_t seed = json_get<uint64_t>(resumed.extra, "seed", o.seed);
  // The samples come again from the seed and the mesh: a resumed run needs the same mesh.
  TESSERA_CHECK(o.run.resume_path.empty() || json_get<uint64_t>(resumed.extra, "triangles", 0) == repair.triangles_in,
                "fit sdf: {} was trained on a mesh of {} triangles, {} has {}; resume with the same mesh",
                o.run.resume_path, json_get<uint64_t>(resumed.extra, "triangles", 0), o.mesh_path, repair.triangles_in);
  ensure_output_folder(o.run.out_dir);
  auto out_path = [&](const std::string& name) { return (std::filesystem::path(o.run.out_dir) / name).string(); };
  const std::string snapshot_path = o.run.snapshot_path.empty() ? out_path("model.tsnap") : o.run.snapshot_path;
  const size_t batch = size_t(1) << (o.log2_batch ? o.log2_batch : (cuda ? 18 : 14));
  const size_t pool = std::max(batch, size_t(1) << (o.log2_samples ? o.log2_samples : (cuda ? 22 : 18)));
  TESSERA_CHECK(o.log2_samples == 0 || pool == size_t(1) << o.log2_samples,
                "fit sdf: --log2-samples {} makes fewer samples than one batch (--log2-batch gives 2^{})",
                o.log2_samples, std::countr_zero(batch));
  const uint32_t res = o.resolution ? o.resolution : (cuda ? 256 : 96);
  const uint32_t image_size = o.image_size ? o.image_size : (cuda ? 512 : 256);

  fmt::print("fit sdf: {} ({} triangles, {} vertices) on {}, batch {}, {} params ({} in the encoding)\n", o.mesh_path,
             repair.triangles_in, mesh.n_vertices(), to_string(dev), batch, trainer->n_params(),
             trainer->model().n_table_params());
  fmt::print("fit sdf: mesh: {}\n", repair.summary());
  std::vector<float> positions, distances;
  Stopwatch sample_clock;
  geometry::sdf_samples(queries, map, pool, seed, positions, distances);
  check_both_sides(o.mesh_path, queries, map, repair, positions, distances);
  const size_t inside = size_t(std::count_if(distances.begin(), distances.end(), [](float d) { return d < 0; }));
  fmt::print("fit sdf: {} training samples ({:.1f}% inside) in {:.2f} s (mesh read, repaired and indexed in {:.2f} s)\n",
             pool, 100.0 * double(inside) / double(pool), sample_clock.seconds(),
             load_clock.seconds() - sample_clock.seconds());
  Buffer<float> pool_positions = make_buffer(dev, positions), pool_distances = make_buffer(dev, distances);
  const Buffer<float> ones = make_buffer(dev, std::vector<float>(batch, 1.0f));
  if (o.eikonal > 0) fmt::print("fit sdf: eikonal term, weight {}\n", o.eikonal);
  SdfField field(*trainer, dev);
  double diagonal2 = 0;  // of the mesh's bounding box: Chamfer distances are also given relative to it
  for (int k = 0; k < 3; ++k)
    diagonal2 += double(queries.bounds_max()[k] - queries.bounds_min()[k]) *
                 (queries.bounds_max()[k] - queries.bounds_min()[k]);
  const double diagonal = std::sqrt(diagonal2);

  nn::SessionOptions so;
  so.steps = o.steps ? o.steps : (o.seconds > 0 ? 0 : 2000);
  so.seconds = o.seconds;
  so.eval_at = kMilestones;
  float loss = 0;
  geometry::Mesh learned;
  geometry::SurfaceComparison last{};
  nn::TrainingSession::Hooks hooks;
  hooks.step = [&](const nn::TrainingSession& s) {
    trainer->optimizer().set_progress(s.fraction_done());
    const size_t first = size_t(trainer->steps()) * batch % (pool - batch + 1);
    const nn::ConstView x = pool_positions.matrix(pool, 3).rows(first, batch);
    const nn::ConstView d = pool_distances.matrix(pool, 1).rows(first, batch);
    if (o.eikonal > 0) {
      trainer->training_step_async(x, d, ones.matrix(batch, 1), [&](nn::ConstView g, nn::View dT_dg) {
        ops::call<ops::EikonalGradient>(trainer->stream(), o.eikonal, g, dT_dg);
      });
      loss = trainer->last_loss();
    } else {
      loss = trainer->training_step(x, d);
    }
  };
  hooks.read_loss = [&] { return loss; };
  double residual = 0;
  hooks.evaluate = [&](const nn::SessionEvaluation&, nn::EvalReason) {
    residual = eikonal_residual(*trainer, pool_positions.matrix(pool, 3).rows(0, batch), ones.matrix(batch, 1));
    learned = extract_surface(field, res, map);
    if (learned.n_triangles() == 0) return Json{{"triangles", 0}, {"eikonal_residual", residual}};
    last = geometry::compare_surfaces(queries, geometry::MeshQueries(learned), size_t(1) << 16, seed);
    return Json{{"chamfer", last.chamfer}, {"chamfer_relative", last.chamfer / diagonal},
                {"normal_consistency", last.normal_consistency}, {"triangles", learned.n_triangles()},
                {"eikonal_residual", residual}};
  };
  std::unique_ptr<ProgressBar> bar;
  hooks.after_step = [&](const nn::TrainingSession& s) {
    bar->update(s.progress_done(), fmt::format("loss {:.3e} chamfer {:.2e}", loss, last.chamfer / diagonal));
  };
  nn::TrainingSession session(so, hooks, resumed, o.run.resume_path.empty() ? "fit sdf" : o.run.resume_path);
  bar = std::make_unique<ProgressBar>(fmt::format("fit sdf ({})", to_string(dev)), session.progress_total(),
                                      !o.run.no_progress);
  const nn::RunRecord& record = session.run();
  bar->finish(fmt::format("chamfer {:.2e} of the diagonal", last.chamfer / diagonal));
  TESSERA_CHECK(learned.n_triangles() > 0, "fit sdf: the learned distance has no zero crossing in the cube (no surface "
                "to extract after {} steps)", record.steps);

  geometry::write_ply(out_path("mesh.ply"), learned);
  write_image_png(out_path("normals.png"), int(image_size), int(image_size), render_normals(field, image_size));
  std::string csv = "step,train_seconds,loss,chamfer,chamfer_relative,normal_consistency,eikonal_residual\n";
  Json at = Json::array();
  for (const auto& e : record.evaluations) {
    const double c = json_get<double>(e.metrics, "chamfer", 0), nc = json_get<double>(e.metrics, "normal_consistency", 0);
    const double er = json_get<double>(e.metrics, "eikonal_residual", 0);
    csv += fmt::format("{},{:.4f},{:.6e},{:.6e},{:.6e},{:.6f},{:.6f}\n", e.step, e.seconds, e.loss, c, c / diagonal, nc,
                       er);
    at.push_back({{"seconds", e.seconds}, {"step", e.step}, {"chamfer", c}, {"chamfer_relative", c / diagonal},
                  {"normal_consistency", nc}, {"eikonal_residual", er}});
  }
  write_file_atomic(out_path("chamfer.csv"), csv);
  nn::RunRecord saved = record;
  saved.extra["seed"] = seed;
  saved.extra["triangles"] = repair.triangles_in;
  nn::save_training_snapshot(*trainer, snapshot_path, saved.to_json());

  fmt::print("fit sdf: {} steps in {:.2f} s of training ({:.0f} steps/s)\n", record.steps, record.train_seconds,
             session.steps_per_second());
  for (const auto& e : at)
    fmt::print("  {:>8.2f} s  step {:>7}  Chamfer {:.3e} ({:.2e} of the diagonal)  normal consistency {:.4f}  "
               "eikonal residual {:.4f}\n",
               e["seconds"].get<double>(), e["step"].get<uint64_t>(), e["chamfer"].get<double>(),
               e["chamfer_relative"].get<double>(), e["normal_consistency"].get<double>(),
               e["eikonal_residual"].get<double>());
  fmt::print("  wrote {}, {}, {}, {}\n", out_path("mesh.ply"), out_path("normals.png"), out_path("chamfer.csv"),
             snapshot_path);
  write_json_result(o.run.json_path, Json{{"command", "fit sdf"},
                                      {"mesh", o.mesh_path},
                                      {"triangles", repair.triangles_in},
                                      {"mesh_repair", repair.to_json()},
                                      {"inside_fraction", double(inside) / double(pool)},
                                      {"device", to_string(dev)},
                                      {"batch", batch},
                                      {"samples", pool},
                                      {"steps", record.steps},
                                      {"train_seconds", record.train_seconds},
                                      {"chamfer", last.chamfer},
                                      {"chamfer_relative", last.chamfer / diagonal},
                                      {"normal_consistency", last.normal_consistency},
                                      {"eikonal_residual", residual},
                                      {"eikonal_weight", o.eikonal},
                                      {"learned_triangles", learned.n_triangles()},
                                      {"evaluations", at},
                                      {"snapshot", snapshot_path},
                                      {"config", trainer->config()}});
}

}  // namespace

void register_fit_sdf(CLI::App& fit) {
  static FitSdfOptions o;
  auto* cmd = fit.add_subcommand("sdf", "learn a mesh's signed distance with a hash grid + fully fused MLP, and mesh it");
  cmd->add_option("mesh", o.mesh_path, fmt::format("triangle mesh ({})", geometry::kMeshFormats))->required();
  cmd->add_option("--config", o.config_path,
                  "tiny-cuda-nn style JSON (encoding, network, loss, optimizer); default: instant-ngp's SDF model, L1 "
                  "loss");
  cmd->add_option("--steps", o.steps, "training steps (default 2000 unless --seconds is given)");
  cmd->add_option("--seconds", o.seconds, "stop after this much training time")->check(finite_non_negative());
  cmd->add_option("--log2-batch", o.log2_batch, "samples per step = 2^N (default 18 on CUDA, 14 on the CPU)")
      ->check(CLI::Range(4, 24));
  cmd->add_option("--log2-samples", o.log2_samples,
                  "training samples made from the mesh = 2^N (default 22 on CUDA, 18 on the CPU)")
      ->check(CLI::Range(8, 26));
  cmd->add_option("--resolution", o.resolution, "lattice the surface is extracted on (default 256 on CUDA, 96 on the CPU)")
      ->check(CLI::Range(8, 1024));
  cmd->add_option("--image-size", o.image_size, "normals rendering, pixels a side (default 512 on CUDA, 256 on the CPU)")
      ->check(CLI::Range(16, 4096));
  cmd->add_option("--eikonal", o.eikonal,
                  "weight of an eikonal term, mean (|grad f| - 1)^2, trained through second derivatives "
                  "(default 0: none)")
      ->check(finite_non_negative());
  cmd->add_option("--seed", o.seed, "random seed (initialization and samples; a resumed run keeps its snapshot's)")
      ->capture_default_str();
  add_fit_run_options(*cmd, o.run, "fit sdf", "same config and mesh", "mesh.ply, normals.png, chamfer.csv");
  cmd->callback([] { run(o); });
}

}  // namespace tessera::app
