// COLMAP sparse models: the binary and text forms read alike, poses convert to NeRF's
// convention exactly, the colmap2nerf orientation keeps the geometry, and bad files are one
// clear error. Lenses: every camera model round-trips pixel -> ray -> pixel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "ops/nerf_math.h"
#include "support/errors.h"
#include "support/paths.h"
#include "support/procedural_scene.h"
#include "tessera/core/image_io.h"
#include "tessera/nerf/colmap.h"
#include "tessera/nerf/dataset.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Pose = std::array<std::array<double, 4>, 4>;

// A rotation matrix's quaternion (w, x, y, z).
std::array<double, 4> quaternion(const double r[3][3]) {
  const double tr = r[0][0] + r[1][1] + r[2][2];
  std::array<double, 4> q;
  if (tr > 0) {
    const double s = 2 * std::sqrt(tr + 1);
    q = {0.25 * s, (r[2][1] - r[1][2]) / s, (r[0][2] - r[2][0]) / s, (r[1][0] - r[0][1]) / s};
  } else if (r[0][0] > r[1][1] && r[0][0] > r[2][2]) {
    const double s = 2 * std::sqrt(1 + r[0][0] - r[1][1] - r[2][2]);
    q = {(r[2][1] - r[1][2]) / s, 0.25 * s, (r[0][1] + r[1][0]) / s, (r[0][2] + r[2][0]) / s};
  } else if (r[1][1] > r[2][2]) {
    const double s = 2 * std::sqrt(1 + r[1][1] - r[0][0] - r[2][2]);
    q = {(r[0][2] - r[2][0]) / s, (r[0][1] + r[1][0]) / s, 0.25 * s, (r[1][2] + r[2][1]) / s};
  } else {
    const double s = 2 * std::sqrt(1 + r[2][2] - r[0][0] - r[1][1]);
    q = {(r[1][0] - r[0][1]) / s, (r[0][2] + r[2][0]) / s, (r[1][2] + r[2][1]) / s, 0.25 * s};
  }
  return q;
}

// A NeRF camera-to-world as COLMAP's world-to-camera image.
nerf::ColmapImage colmap_image(const Pose& c2w, uint32_t id, uint32_t camera, const std::string& name) {
  double r[3][3];  // world-to-camera rotation of the OpenCV camera: (c2w with y, z flipped)^T
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[j][i] = c2w[i][j] * (j == 0 ? 1 : -1);
  nerf::ColmapImage im;
  im.id = id, im.camera_id = camera, im.name = name;
  const auto q = quaternion(r);
  std::copy(q.begin(), q.end(), im.qvec);
  for (int i = 0; i < 3; ++i) im.tvec[i] = -(r[i][0] * c2w[0][3] + r[i][1] * c2w[1][3] + r[i][2] * c2w[2][3]);
  return im;
}

nerf::ColmapModel test_model() {
  nerf::ColmapModel m;
  m.cameras.push_back({1, "OPENCV", 64, 48, {50.5, 51.25, 31.5, 24.25, -0.05, 0.01, 0.001, -0.002}});
  m.cameras.push_back({2, "OPENCV_FISHEYE", 80, 60, {30, 30.5, 40.5, 29.5, 0.02, -0.01, 0.003, -0.001}});
  for (int i = 0; i < 6; ++i) {
    const double a = 2 * M_PI * i / 6;
    const Pose c2w = test::look_at_origin({3 * std::cos(a) + 0.5, 3 * std::sin(a) - 0.25, 1.0 + 0.1 * i});
    m.images.push_back(colmap_image(c2w, uint32_t(10 + i), i < 4 ? 1 : 2, "img_" + std::to_string(i) + ".png"));
  }
  for (int i = 0; i < 50; ++i)
    m.points.push_back({{std::sin(i * 1.3), std::cos(i * 0.7), 0.02 * i - 0.5}, {uint8_t(i), uint8_t(2 * i), 7}, 0.5});
  return m;
}

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// COLMAP's binary files of a model (points without tracks but for one entry).
std::array<std::string, 3> binary_files(const nerf::ColmapModel& m) {
  const std::map<std::string, int> ids = {{"OPENCV", 4}, {"OPENCV_FISHEYE", 5}, {"PINHOLE", 1}};
  std::string cams, ims, pts;
  put<uint64_t>(cams, m.cameras.size());
  for (const auto& c : m.cameras) {
    put<uint32_t>(cams, c.id), put<int32_t>(cams, ids.at(c.model)), put<uint64_t>(cams, c.width),
        put<uint64_t>(cams, c.height);
    for (double p : c.params) put(cams, p);
  }
  put<uint64_t>(ims, m.images.size());
  for (const auto& im : m.images) {
    put<uint32_t>(ims, im.id);
    for (double q : im.qvec) put(ims, q);
    for (double t : im.tvec) put(ims, t);
    put<uint32_t>(ims, im.camera_id);
    ims += im.name, ims += '\0';
    put<uint64_t>(ims, 2);  // two 2-D points
    for (int k = 0; k < 2; ++k) put(ims, 1.5), put(ims, 2.5), put<int64_t>(ims, -1);
  }
  put<uint64_t>(pts, m.points.size());
  for (size_t i = 0; i < m.points.size(); ++i) {
    const auto& p = m.points[i];
    put<uint64_t>(pts, i + 1);
    for (double x : p.xyz) put(pts, x);
    pts.append(reinterpret_cast<const char*>(p.rgb), 3);
    put(pts, p.error);
    put<uint64_t>(pts, 1), put<uint32_t>(pts, 10), put<uint32_t>(pts, 0);
  }
  return {cams, ims, pts};
}

std::array<std::string, 3> text_files(const nerf::ColmapModel& m) {
  std::string cams = "# Camera list with one line of data per camera:\n", ims = "# Image list\n#\n",
              pts = "# 3D point list\n";
  for (const auto& c : m.cameras) {
    cams += fmt::format("{} {} {} {}", c.id, c.model, c.width, c.height);
    for (double p : c.params) cams += fmt::format(" {}", p);
    cams += "\n";
  }
  for (size_t i = 0; i < m.images.size(); ++i) {
    const auto& im = m.images[i];
    ims += fmt::format("{} {} {} {} {} {} {} {} {} {}\n", im.id, im.qvec[0], im.qvec[1], im.qvec[2], im.qvec[3],
                       im.tvec[0], im.tvec[1], im.tvec[2], im.camera_id, im.name);
    ims += i % 2 ? "1.5 2.5 -1 3.5 4.5 -1\n" : "\n";  // COLMAP writes an empty line for no points
  }
  for (size_t i = 0; i < m.points.size(); ++i) {
    const auto& p = m.points[i];
    pts += fmt::format("{} {} {} {} {} {} {} {} 10 0\n", i + 1, p.xyz[0], p.xyz[1], p.xyz[2], p.rgb[0], p.rgb[1],
                       p.rgb[2], p.error);
  }
  return {cams, ims, pts};
}

void write_model(const fs::path& dir, const std::array<std::string, 3>& files, const char* ext) {
  fs::create_directories(dir);
  const char* stems[] = {"cameras", "images", "points3D"};
  for (int i = 0; i < 3; ++i) std::ofstream(dir / (std::string(stems[i]) + ext), std::ios::binary) << files[i];
}

void expect_same(const nerf::ColmapModel& a, const nerf::ColmapModel& b) {
  ASSERT_EQ(a.cameras.size(), b.cameras.size());
  ASSERT_EQ(a.images.size(), b.images.size());
  ASSERT_EQ(a.points.size(), b.points.size());
  for (size_t i = 0; i < a.cameras.size(); ++i) {
    EXPECT_EQ(a.cameras[i].model, b.cameras[i].model);
    EXPECT_EQ(a.cameras[i].width, b.cameras[i].width);
    EXPECT_EQ(a.cameras[i].params, b.cameras[i].params);
  }
  for (size_t i = 0; i < a.images.size(); ++i) {
    EXPECT_EQ(a.images[i].name, b.images[i].name);
    EXPECT_EQ(a.images[i].camera_id, b.images[i].camera_id);
    for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(a.images[i].qvec[k], b.images[i].qvec[k]);
    for (int k = 0; k < 3; ++k) EXPECT_DOUBLE_EQ(a.images[i].tvec[k], b.images[i].tvec[k]);
  }
  for (size_t i = 0; i < a.points.size(); ++i)
    for (int k = 0; k < 3; ++k) {
      EXPECT_DOUBLE_EQ(a.points[i].xyz[k], b.points[i].xyz[k]);
      EXPECT_EQ(a.points[i].rgb[k], b.points[i].rgb[k]);
    }
}

TEST(Colmap, BinaryAndTextFormsReadAlike) {
  const nerf::ColmapModel m = test_model();
  const auto dir = test::fresh_dir("tessera_colmap_forms");
  write_model(dir / "bin", binary_files(m), ".bin");
  write_model(dir / "txt" / "sparse" / "0", text_files(m), ".txt");
  const nerf::ColmapModel bin = nerf::read_colmap_model((dir / "bin").string());
  ASSERT_EQ(nerf::find_colmap_model((dir / "txt").string()), (dir / "txt" / "sparse" / "0").string());
  const nerf::ColmapModel txt = nerf::read_colmap_model((dir / "txt" / "sparse" / "0").string());
  expect_same(bin, m);
  expect_same(txt, m);
}

TEST(Colmap, PosesConvertExactlyAndOrientationKeepsTheGeometry) {
  const nerf::ColmapModel m = test_model();
  const auto kept = nerf::colmap_to_transforms(m, {.keep_colmap_coords = true});
  // Sorted by name, each pose is the camera-to-world the model was made from.
  for (int i = 0; i < 6; ++i) {
    const double a = 2 * M_PI * i / 6;
    const Pose c2w = test::look_at_origin({3 * std::cos(a) + 0.5, 3 * std::sin(a) - 0.25, 1.0 + 0.1 * i});
    const Json& f = kept.transforms["frames"][i];
    EXPECT_EQ(f["file_path"], "img_" + std::to_string(i) + ".png");
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(f["transform_matrix"][r][c].get<double>(), c2w[r][c], 1e-9);
    // Two cameras: intrinsics per frame, each with its lens.
    EXPECT_EQ(f["camera_model"], i < 4 ? "OPENCV" : "OPENCV_FISHEYE");
    EXPECT_EQ(f["is_fisheye"], i >= 4);
  }
  EXPECT_FALSE(kept.transforms.contains("fl_x"));
  // colmap2nerf's orientation: a similarity of the poses (distance ratios and relative
  // rotations kept), the mean up vector along +z, cameras ~4 from the centre.
  const auto oriented = nerf::colmap_to_transforms(m, {});
  const Json& fa = kept.transforms["frames"];
  const Json& fb = oriented.transforms["frames"];
  auto position = [](const Json& f) {
    return std::array<double, 3>{f["transform_matrix"][0][3], f["transform_matrix"][1][3], f["transform_matrix"][2][3]};
  };
  auto distance = [](std::array<double, 3> a, std::array<double, 3> b) {
    return std::hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]);
  };
  const double ratio = distance(position(fb[0]), position(fb[1])) / distance(position(fa[0]), position(fa[1]));
  std::array<double, 3> up{0, 0, 0};
  double mean_distance = 0;
  for (int i = 0; i < 6; ++i) {
    for (int j = i + 1; j < 6; ++j)
      EXPECT_NEAR(distance(position(fb[i]), position(fb[j])), ratio * distance(position(fa[i]), position(fa[j])), 1e-9);
    for (int k = 0; k < 3; ++k) up[k] += fb[i]["transform_matrix"][k][1].get<double>();
    mean_distance += std::hypot(position(fb[i])[0], position(fb[i])[1], position(fb[i])[2]) / 6;
  }
  EXPECT_NEAR(up[0], 0, 1e-9);
  EXPECT_NEAR(up[1], 0, 1e-9);
  EXPECT_GT(up[2], 0);
  EXPECT_GT(mean_distance, 3.0);  // about the centre of attention, not the origin: near 4
  EXPECT_LT(mean_distance, 5.0);
  // The points moved with the cameras.
  ASSERT_EQ(oriented.points.size(), m.points.size());
  const uint32_t aabb = oriented.transforms["aabb_scale"];
  EXPECT_TRUE(aabb >= 1 && aabb <= 128 && (aabb & (aabb - 1)) == 0);
  EXPECT_EQ(nerf::colmap_to_transforms(m, {.aabb_scale = 8}).transforms["aabb_scale"], 8);
}

TEST(Colmap, TrainsFromAModelFolderWithItsImages) {
  nerf::ColmapModel m = test_model();
  m.images.resize(4);  // the OPENCV camera only
  const auto dir = test::fresh_dir("tessera_colmap_scene");
  write_model(dir / "sparse" / "0", binary_files(m), ".bin");
  fs::create_directories(dir / "images");
  for (const auto& im : m.images)
    write_png((dir / "images" / im.name).string(), 64, 48, 3, std::vector<uint8_t>(64 * 48 * 3, 128));
  for (const fs::path& scene : {dir, dir / "sparse" / "0"}) {
    const nerf::Dataset d = nerf::load_dataset(scene.string(), {.split = "train"});
    ASSERT_EQ(d.frames.size(), 4u);
    EXPECT_EQ(d.frames[0].camera.k1, -0.05f);
    EXPECT_EQ(d.frames[0].camera.cx, 31.5f);
    EXPECT_EQ(d.frames[0].camera.lens, ops::nerf::Lens::perspective);
  }
  const nerf::Dataset test = nerf::load_dataset(dir.string(), {.split = "test", .holdout = 2});
  EXPECT_EQ(test.frames.size(), 2u);
  fs::remove_all(dir / "images");
  EXPECT_NE(test::error_of([&] { nerf::load_dataset(dir.string()); }).find("img_0.png"), std::string::npos);
}

TEST(Colmap, BadFilesAreOneClearError) {
  const nerf::ColmapModel m = test_model();
  const auto files = binary_files(m);
  auto parse = [&](std::string cams, std::string ims, std::string pts) {
    return test::error_of([&] { nerf::parse_colmap_model(cams, ims, pts, true, "m"); });
  };
  // Every truncation of every file is an error naming that file.
  for (int which = 0; which < 3; ++which)
    for (size_t cut = 0; cut < files[which].size(); cut += 7) {
      auto f = files;
      f[which].resize(cut);
      const std::string e = parse(f[0], f[1], f[2]);
      const char* names[] = {"cameras.bin", "images.bin", "points3D.bin"};
      ASSERT_NE(e.find(names[which]), std::string::npos) << "cut " << cut << ": " << e;
    }
  // A count larger than the file: refused before allocating.
  auto huge = files;
  const uint64_t n = uint64_t(1) << 40;
  std::memcpy(huge[2].data(), &n, 8);
  EXPECT_NE(parse(huge[0], huge[1], huge[2]).find("more than it holds"), std::string::npos);
  auto bad_model = files;
  const int32_t model_id = 99;
  std::memcpy(bad_model[0].data() + 12, &model_id, 4);
  EXPECT_NE(parse(bad_model[0], bad_model[1], bad_model[2]).find("unknown model id 99"), std::string::npos);
  // An image naming a camera that is not there.
  nerf::ColmapModel orphan = m;
  orphan.images[0].camera_id = 77;
  const auto t = text_files(orphan);
  EXPECT_NE(test::error_of([&] { nerf::parse_colmap_model(t[0], t[1], t[2], false, "m"); }).find("camera 77"),
            std::string::npos);
  const auto good = text_files(m);
  auto text_error = [&](std::string cams, std::string ims) {
    return test::error_of([&] { nerf::parse_colmap_model(cams, ims, good[2], false, "m"); });
  };
  EXPECT_NE(text_error("1 OPENCV 64 48 1 2 3\n", good[1]).find("has 8 parameters, the line has 3"), std::string::npos);
  EXPECT_NE(text_error("1 WEIRD 64 48 1\n", good[1]).find("unknown camera model 'WEIRD'"), std::string::npos);
  EXPECT_NE(text_error("1 PINHOLE 64 48 1 nan 3 4\n", good[1]).find("not a finite number"), std::string::npos);
  EXPECT_NE(text_error(good[0], "1 0 0 0 0 0 0 0 1 a.png\n\n").find("degenerate rotation"), std::string::npos);
  // A model tessera reads but does not train.
  EXPECT_NE(test::error_of([] { nerf::colmap_camera({3, "FOV", 10, 10, {5, 5, 5, 5, 0.1}}); }).find("FOV camera"),
            std::string::npos);
}

// LLFF's poses_bounds.npy (float64, N x 17) for forward-facing cameras at `positions`.
std::string llff_npy(const std::vector<std::array<double, 3>>& positions, double h, double w, double f) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(positions.size()) +
                       ", 17), }";
  header.resize(118, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 255) + char(header.size() >> 8) + header;
  for (const auto& p : positions) {
    // Columns down, right, back (a camera looking down -z, y up), position, (h, w, f).
    const double m[3][5] = {{0, 1, 0, p[0], h}, {-1, 0, 0, p[1], w}, {0, 0, 1, p[2], f}};
    for (const auto& row : m)
      for (double v : row) put(bytes, v);
    put(bytes, 2.0), put(bytes, 6.0);  // near, far
  }
  return bytes;
}

TEST(Llff, ForwardFacingScenesLoadWithTheirImagesFocalLength) {
  const auto dir = test::fresh_dir("tessera_llff");
  const std::vector<std::array<double, 3>> positions = {{0, 0, 0}, {0.2, 0, 0}, {0, 0.2, 0}, {-0.2, 0.1, 0}, {0.1, -0.2, 0.05}};
  std::ofstream(dir / "poses_bounds.npy", std::ios::binary) << llff_npy(positions, 60, 80, 70);
  fs::create_directories(dir / "images");
  for (int i = 0; i < 5; ++i)  // half the size poses_bounds.npy describes (LLFF's images_2)
    write_png((dir / "images" / fmt::format("IMG_{}.png", i)).string(), 40, 30, 3, std::vector<uint8_t>(40 * 30 * 3, 90));
  const nerf::Dataset d = nerf::load_dataset(dir.string());
  ASSERT_EQ(d.frames.size(), 5u);
  EXPECT_NEAR(d.frames[0].camera.fl_x, 35.0f, 1e-3f);
  EXPECT_NEAR(d.frames[0].camera.cx, 20.0f, 1e-6f);
  // Oriented as a similarity: distance ratios kept; every camera looks the same way.
  auto pos = [&](int i) { return std::array<double, 3>{d.frames[i].c2w[0][3], d.frames[i].c2w[1][3], d.frames[i].c2w[2][3]}; };
  auto dist = [](std::array<double, 3> a, std::array<double, 3> b) { return std::hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]); };
  const double s = dist(pos(0), pos(1)) / 0.2;
  for (int i = 0; i < 5; ++i)
    for (int j = i + 1; j < 5; ++j)
      EXPECT_NEAR(dist(pos(i), pos(j)), s * std::hypot(positions[i][0] - positions[j][0], positions[i][1] - positions[j][1],
                                                       positions[i][2] - positions[j][2]), 1e-4);
  for (int i = 1; i < 5; ++i)
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(d.frames[i].c2w[r][2], d.frames[0].c2w[r][2], 1e-5);
  // Bad arrays: one clear error each.
  auto error = [&](const std::string& npy) {
    std::ofstream(dir / "poses_bounds.npy", std::ios::binary) << npy;
    return test::error_of([&] { nerf::load_dataset(dir.string()); });
  };
  EXPECT_NE(error(llff_npy(positions, 60, 80, 70).substr(0, 300)).find("does not fit"), std::string::npos);
  EXPECT_NE(error(llff_npy({{0, 0, 0}}, 60, 80, 70)).find("1 poses but the image folder 5 images"), std::string::npos);
  EXPECT_NE(error("not numpy").find("not a .npy file"), std::string::npos);
  EXPECT_NE(error(llff_npy(positions, 60, 80, -1)).find("not an image's"), std::string::npos);
}

// Each lens: pixel -> ray -> pixel within 1e-4 px over the image (corners included).
TEST(CameraModels, EveryLensRoundTrips) {
  std::vector<nerf::ColmapCamera> cameras = {
      {1, "SIMPLE_PINHOLE", 640, 480, {500, 320, 240}},
      {2, "PINHOLE", 640, 480, {500, 520, 330, 250}},
      {3, "SIMPLE_RADIAL", 640, 480, {500, 320, 240, -0.08}},
      {4, "RADIAL", 640, 480, {500, 320, 240, -0.1, 0.02}},
      {5, "OPENCV", 640, 480, {500, 505, 318, 243, -0.12, 0.03, 0.001, -0.0015}},
      {6, "FULL_OPENCV", 640, 480, {500, 505, 318, 243, -0.12, 0.03, 0.001, -0.0015, 0.002, 0.01, -0.005, 0.001}},
      {7, "OPENCV_FISHEYE", 640, 480, {220, 221, 321, 239, 0.03, -0.01, 0.004, -0.001}},
      {8, "SIMPLE_RADIAL_FISHEYE", 640, 480, {200, 320, 240, 0.02}},
      {9, "RADIAL_FISHEYE", 640, 480, {200, 320, 240, 0.02, -0.004}}};
  for (const auto& cam : cameras) {
    const ops::nerf::CameraModel c = nerf::colmap_camera(cam);
    double worst = 0;
    std::vector<float> us, vs;
    for (float u = 0.5f; u < 640; u += 31.5f) us.push_back(u);
    for (float v = 0.5f; v < 480; v += 23.5f) vs.push_back(v);
    us.push_back(639.5f), vs.push_back(479.5f);  // the corners (a fisheye's are 104 degrees off the axis here)
    for (float v : vs)
      for (float u : us) {
        const ops::nerf::Vec3 d = ops::nerf::pixel_direction(c, u, v);
        float pu, pv;
        ASSERT_TRUE(ops::nerf::project_to_pixel(c, d, pu, pv)) << cam.model << " at " << u << ", " << v;
        worst = std::max({worst, double(std::fabs(pu - u)), double(std::fabs(pv - v))});
      }
    EXPECT_LT(worst, 1e-4) << cam.model;  // measured <= 6.1e-5 px (float at 640 px: one ulp is 6.1e-5)
    std::printf("%-22s worst round trip %.2e px\n", cam.model.c_str(), worst);
  }
}

}  // namespace
}  // namespace tessera
