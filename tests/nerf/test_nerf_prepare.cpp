// From photos to a trained NeRF on the CPU: `nerf prepare` (COLMAP) recovers the cameras of
// a textured scene the test renders itself, and a short training on the prepared folder
// renders held-back views; a fisheye capture trains to a quality its pinhole reading does not.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "support/cli.h"
#include "support/gpu.h"
#include "support/nerf_model.h"
#include "support/paths.h"
#include "support/textured_scene.h"
#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/trainer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
// These run on the CPU backend and the CLI's host code alike in every build.
using Pose = std::array<std::array<double, 4>, 4>;
using Vec = std::array<double, 3>;

// The similarity (scale s, rotation q as a quaternion, translation) taking points p onto q
// in the least-squares sense (Horn 1987: the quaternion is the top eigenvector of a 4x4
// matrix, found here by power iteration on a shifted copy).
struct Similarity {
  double scale = 1;
  double r[3][3] = {};
  Vec t{0, 0, 0};
  Vec apply(Vec p) const {
    Vec o;
    for (int i = 0; i < 3; ++i) o[i] = scale * (r[i][0] * p[0] + r[i][1] * p[1] + r[i][2] * p[2]) + t[i];
    return o;
  }
};

Similarity align(const std::vector<Vec>& p, const std::vector<Vec>& q) {
  Vec pm{0, 0, 0}, qm{0, 0, 0};
  for (size_t i = 0; i < p.size(); ++i)
    for (int k = 0; k < 3; ++k) pm[k] += p[i][k] / double(p.size()), qm[k] += q[i][k] / double(p.size());
  double s[3][3] = {}, pp = 0;
  for (size_t i = 0; i < p.size(); ++i)
    for (int a = 0; a < 3; ++a) {
      pp += (p[i][a] - pm[a]) * (p[i][a] - pm[a]);
      for (int b = 0; b < 3; ++b) s[a][b] += (p[i][a] - pm[a]) * (q[i][b] - qm[b]);
    }
  const double n[4][4] = {{s[0][0] + s[1][1] + s[2][2], s[1][2] - s[2][1], s[2][0] - s[0][2], s[0][1] - s[1][0]},
                          {s[1][2] - s[2][1], s[0][0] - s[1][1] - s[2][2], s[0][1] + s[1][0], s[2][0] + s[0][2]},
                          {s[2][0] - s[0][2], s[0][1] + s[1][0], -s[0][0] + s[1][1] - s[2][2], s[1][2] + s[2][1]},
                          {s[0][1] - s[1][0], s[2][0] + s[0][2], s[1][2] + s[2][1], -s[0][0] - s[1][1] + s[2][2]}};
  double shift = 0;
  for (const auto& row : n)
    for (double v : row) shift += std::fabs(v);
  double v[4] = {1, 0.1, 0.2, 0.3};
  for (int it = 0; it < 5000; ++it) {
    double w[4] = {};
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) w[i] += (n[i][j] + (i == j ? shift : 0)) * v[j];
    const double len = std::sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2] + w[3] * w[3]);
    for (int i = 0; i < 4; ++i) v[i] = w[i] / len;
  }
  const double a = v[0], x = v[1], y = v[2], z = v[3];
  Similarity sim;
  const double r[3][3] = {{a * a + x * x - y * y - z * z, 2 * (x * y - a * z), 2 * (x * z + a * y)},
                          {2 * (x * y + a * z), a * a - x * x + y * y - z * z, 2 * (y * z - a * x)},
                          {2 * (x * z - a * y), 2 * (y * z + a * x), a * a - x * x - y * y + z * z}};
  std::copy(&r[0][0], &r[0][0] + 9, &sim.r[0][0]);
  double qr = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    Vec pc{p[i][0] - pm[0], p[i][1] - pm[1], p[i][2] - pm[2]};
    for (int k = 0; k < 3; ++k) qr += (q[i][k] - qm[k]) * (r[k][0] * pc[0] + r[k][1] * pc[1] + r[k][2] * pc[2]);
  }
  sim.scale = qr / pp;
  const Vec moved = sim.apply(pm);  // t is still 0
  for (int k = 0; k < 3; ++k) sim.t[k] = qm[k] - moved[k];
  return sim;
}

// Angle (degrees) between rotations a and (sim.r times b).
double rotation_error_degrees(const Pose& truth, const Json& m, const Similarity& sim) {
  double trace = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double rb = 0;  // (sim.r * b)[j][i], b = m's rotation
      for (int k = 0; k < 3; ++k) rb += sim.r[j][k] * m[k][i].get<double>();
      trace += truth[j][i] * rb;  // trace(a^T (r b))
    }
  return std::acos(std::clamp((trace - 1) / 2, -1.0, 1.0)) * 180 / M_PI;
}

TEST(NerfPrepare, RecoversTheCamerasOfATexturedSceneAndTrains) {
  if (!test::command_exists("colmap")) GTEST_SKIP() << "colmap is not installed (scripts/bootstrap.sh installs it)";
  const auto dir = test::fresh_dir("tessera_nerf_prepare");
  const int n = 30, width = 320, height = 240;
  const double focal = 300;
  const auto cameras = test::ring_cameras(n);
  fs::create_directories(dir / "photos");
  for (int i = 0; i < n; ++i)
    write_png((dir / "photos" / fmt::format("view_{:02d}.png", i)).string(), width, height, 4,
              test::render_textured({cameras[i], width, height, focal, false}));
  const auto start = std::chrono::steady_clock::now();
  const auto r = test::run_cli("nerf prepare " + (dir / "photos").string() + " --out " + (dir / "scene").string() +
                               " --camera-model PINHOLE --json " + (dir / "prepare.json").string());
  const double prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.code, 0) << r.output;
  std::printf("%s\nprepare: %.1f s\n", r.output.c_str(), prepare_seconds);
  const Json report = load_json_file((dir / "prepare.json").string());
  EXPECT_EQ(report["registered"].get<int>(), n);

  // Camera centres and rotations after the best similarity onto the truth.
  const Json t = load_json_file((dir / "scene" / "transforms.json").string());
  ASSERT_EQ(t["frames"].size(), size_t(n));
  std::vector<Vec> recovered, truth;
  for (int i = 0; i < n; ++i) {
    const Json& m = t["frames"][i]["transform_matrix"];
    ASSERT_EQ(t["frames"][i]["file_path"], fmt::format("images/view_{:02d}.png", i));
    recovered.push_back({m[0][3], m[1][3], m[2][3]});
    truth.push_back({cameras[i][0][3], cameras[i][1][3], cameras[i][2][3]});
  }
  const Similarity sim = align(recovered, truth);
  double worst_position = 0, worst_rotation = 0;
  for (int i = 0; i < n; ++i) {
    const Vec p = sim.apply(recovered[i]);
    worst_position = std::max(worst_position, std::hypot(p[0] - truth[i][0], p[1] - truth[i][1], p[2] - truth[i][2]));
    worst_rotation = std::max(worst_rotation, rotation_error_degrees(cameras[i], t["frames"][i]["transform_matrix"], sim));
    if (std::getenv("TESSERA_TEST_VERBOSE"))
      std::printf("camera %d: position error %.4f, rotation %.3f deg\n", i,
                  std::hypot(p[0] - truth[i][0], p[1] - truth[i][1], p[2] - truth[i][2]),
                  rotation_error_degrees(cameras[i], t["frames"][i]["transform_matrix"], sim));
  }
  std::printf("after alignment: worst camera position error %.4f (cameras 4 from the centre), worst rotation %.3f deg, "
              "focal %.2f (true %.0f)\n",
              worst_position, worst_rotation, t["fl_x"].get<double>(), focal);
  // Measured: worst 0.070 (1.7% of the camera distance) and 1.19 degrees (most cameras
  // 0.15-0.45), reprojection error 0.25 px; the focal length within 0.25%.
  EXPECT_LT(worst_position, 0.15);
  EXPECT_LT(worst_rotation, 2.5);
  EXPECT_NEAR(t["fl_x"].get<double>(), focal, 0.01 * focal);

  // A short CPU training on the prepared folder, every 8th view held back.
  nerf::Dataset train = nerf::load_dataset((dir / "scene").string(), {.split = "train", .holdout = 8});
  const nerf::Dataset test = nerf::load_dataset((dir / "scene").string(), {.split = "test", .holdout = 8});
  const Json config = test::cpu_test_nerf_config();
  nerf::NerfTrainer trainer(config, std::move(train), DeviceKind::cpu, 7);
  for (int i = 0; i < 400; ++i) trainer.step();
  const nerf::EvalResult e = nerf::evaluate(trainer, test, {.write_folder = (dir / "renders").string()});
  std::printf("held-back views: PSNR %.2f dB (white)\n", e.psnr_white);
  // Measured 23.14 dB after 400 steps, and 18.83 in a clean clone's run whose poses were as
  // good by the bounds above (0.072, 1.31 deg): COLMAP's threads make its poses differ from
  // run to run, and the short CPU training feels it. An untrained model gives ~11 dB.
  EXPECT_GT(e.psnr_white, 16.0);
}

// A blurred copy (three passes of a 5x5 box filter over RGB) of an RGBA8 image.
std::vector<uint8_t> blurred(std::vector<uint8_t> rgba, int w, int h) {
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<uint8_t> out = rgba;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) {
          int sum = 0, n = 0;
          for (int dy = -2; dy <= 2; ++dy)
            for (int dx = -2; dx <= 2; ++dx)
              if (x + dx >= 0 && x + dx < w && y + dy >= 0 && y + dy < h)
                sum += rgba[(size_t(y + dy) * w + x + dx) * 4 + c], ++n;
          out[(size_t(y) * w + x) * 4 + c] = uint8_t(sum / n);
        }
    rgba = out;
  }
  return rgba;
}

// A phone-style video (a walk around the scene, one frame shaken to a blur) through the
// whole pipeline: frames, the blurry one dropped, sequential matching, every frame posed.
TEST(NerfPrepare, AVideoIsPosedAndItsBlurryFrameDropped) {
  if (!test::command_exists("colmap") || !test::command_exists("ffmpeg"))
    GTEST_SKIP() << "colmap or ffmpeg is not installed (scripts/bootstrap.sh installs them)";
  const auto dir = test::fresh_dir("tessera_nerf_prepare_video");
  const int n = 60, width = 320, height = 240;  // 6 degrees apart: a slow walk at 10 fps
  const auto cameras = test::ring_cameras(n);
  fs::create_directories(dir / "frames");
  for (int i = 0; i < n; ++i) {
    auto rgba = test::render_textured({cameras[i], width, height, 300, false});
    for (size_t p = 3; p < rgba.size(); p += 4) rgba[p] = 255;  // a camera sees black, not transparency
    write_png((dir / "frames" / fmt::format("f_{:03d}.png", i)).string(), width, height, 4,
              i == 24 ? blurred(rgba, width, height) : rgba);
  }
  const std::string video = (dir / "walk.mp4").string();
  ASSERT_EQ(std::system(("ffmpeg -nostdin -loglevel error -y -framerate 10 -i " + (dir / "frames" / "f_%03d.png").string() +
                         " -c:v libx264 -crf 12 -pix_fmt yuv420p " + video).c_str()),
            0);
  const auto r = test::run_cli("nerf prepare " + video + " --fps 10 --out " + (dir / "scene").string() + " --json " +
                               (dir / "prepare.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::printf("%s", r.output.c_str());
  const Json report = load_json_file((dir / "prepare.json").string());
  EXPECT_EQ(report["images_found"].get<int>(), n);
  EXPECT_EQ(report["blurry_dropped"], Json::array({"frame_00025.jpg"}));  // ffmpeg counts from 1
  EXPECT_EQ(report["matcher"], "sequential");
  EXPECT_EQ(report["registered"].get<int>(), n - 1);
  const Json t = load_json_file((dir / "scene" / "transforms.json").string());
  EXPECT_EQ(t["camera_model"], "OPENCV");
  EXPECT_TRUE(t["frames"][0].contains("sharpness"));
  // Running again over a prepared scene needs --overwrite; a missing input is one clear line.
  const auto again = test::run_cli("nerf prepare " + video + " --out " + (dir / "scene").string());
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.output.find("--overwrite"), std::string::npos) << again.output;
  // Never destructive: an input inside the folders prepare replaces, or an OUT/images it did
  // not make, is refused before anything is touched.
  fs::copy_file(video, dir / "scene" / "images" / "walk.mp4");
  const auto inside = test::run_cli("nerf prepare " + (dir / "scene" / "images" / "walk.mp4").string() + " --out " +
                                    (dir / "scene").string() + " --overwrite");
  EXPECT_NE(inside.output.find("is inside"), std::string::npos) << inside.output;
  EXPECT_TRUE(fs::exists(dir / "scene" / "images" / "walk.mp4"));
  fs::create_directories(dir / "mine" / "images");
  fs::copy_file(dir / "frames" / "f_000.png", dir / "mine" / "images" / "keep.png");
  const auto foreign = test::run_cli("nerf prepare " + video + " --out " + (dir / "mine").string() + " --overwrite");
  EXPECT_NE(foreign.output.find("did not put there"), std::string::npos) << foreign.output;
  EXPECT_TRUE(fs::exists(dir / "mine" / "images" / "keep.png"));
  const auto missing = test::run_cli("nerf prepare " + (dir / "nothing.mp4").string() + " --out " + (dir / "x").string());
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.output.find("neither a video file nor a folder"), std::string::npos) << missing.output;
}

// Trains `steps` on the CPU and returns the held-back views' PSNR (white background).
double train_and_evaluate(const fs::path& scene, int steps) {
  nerf::Dataset train = nerf::load_dataset(scene.string(), {.split = "train"});
  const nerf::Dataset test = nerf::load_dataset(scene.string(), {.split = "test"});
  const Json config = test::cpu_test_nerf_config(1u << 13);
  nerf::NerfTrainer trainer(config, std::move(train), DeviceKind::cpu, 7);
  for (int i = 0; i < steps; ++i) trainer.step();
  return nerf::evaluate(trainer, test).psnr_white;
}

// A 150-degree equidistant fisheye capture: read as the fisheye it is, it trains; read as a
// pinhole (what an unknown "is_fisheye" used to do), the views disagree and it does not.
TEST(NerfPrepare, AFisheyeCaptureTrainsOnlyAsAFisheye) {
  const auto dir = test::fresh_dir("tessera_nerf_fisheye");
  const int size = 80;
  const double focal = 0.5 * size / (75 * M_PI / 180);  // the image's edge 75 degrees off the axis
  const auto cameras = test::ring_cameras(28, 2.2);  // close: the scene fills the lens's periphery
  auto write_split = [&](const char* split, bool fisheye) {
    Json frames = Json::array();
    for (int i = 0; i < 28; ++i) {
      if ((i % 7 == 0) != (std::string(split) == "test")) continue;  // every 7th view held back
      const std::string name = fmt::format("{}_{:02d}.png", split, i);
      if (!fs::exists(dir / name))
        write_png((dir / name).string(), size, size, 4, test::render_textured({cameras[i], size, size, focal, true}));
      Json m = Json::array();
      for (const auto& row : cameras[i]) m.push_back(Json(row));
      frames.push_back({{"file_path", name}, {"transform_matrix", m}});
    }
    Json t = {{"fl_x", focal}, {"fl_y", focal}, {"aabb_scale", 2}, {"frames", frames}};
    if (fisheye) t["camera_model"] = "OPENCV_FISHEYE";
    write_file_atomic((dir / fmt::format("transforms_{}.json", split)).string(), t.dump(1));
  };
  write_split("train", true);
  write_split("test", true);
  const double as_fisheye = train_and_evaluate(dir, 300);
  write_split("train", false);
  write_split("test", false);
  const double as_pinhole = train_and_evaluate(dir, 300);
  std::printf("fisheye capture: %.2f dB read as a fisheye, %.2f dB read as a pinhole\n", as_fisheye, as_pinhole);
  // Measured (CPU backend, deterministic): 24.85 dB as a fisheye, 23.00 as a pinhole after
  // 300 steps (26.01 / 23.77 after 600: the gap grows with training).
  EXPECT_GT(as_fisheye, 24.0);
  EXPECT_LT(as_pinhole, 24.0);
  EXPECT_GT(as_fisheye - as_pinhole, 1.0);
}

}  // namespace
}  // namespace tessera
