// The NeRF scene loader on every field it reads, on missing frames and on bad files, all
// generated here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/paths.h"
#include "support/errors.h"
#include "support/procedural_scene.h"
#include "tessera/nerf/camera.h"
#include "tessera/nerf/render.h"
#include "tessera/core/image_io.h"
#include "tessera/nerf/dataset.h"
#include "ops/nerf_math.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::error_of;

void write_image(const fs::path& path, int w, int h, uint8_t value = 100) {
  fs::create_directories(path.parent_path());
  std::vector<uint8_t> rgba(size_t(w) * h * 4, value);
  write_png(path.string(), w, h, 4, rgba);
}

void write_json(const fs::path& path, const Json& j) { std::ofstream(path) << j.dump(1); }

const Json kIdentityPose = Json::array({Json::array({1, 0, 0, 0.5}), Json::array({0, 1, 0, -0.25}),
                                        Json::array({0, 0, 1, 2.0}), Json::array({0, 0, 0, 1})});

TEST(NerfCamera, FieldOfViewAndFocalLengthRoundTrip) {
  EXPECT_NEAR(nerf::focal_length(0.6911112f, 800), 1111.111f, 0.01f);  // NeRF-synthetic's camera_angle_x
  EXPECT_NEAR(nerf::field_of_view(nerf::focal_length(0.9f, 640), 640), 0.9f, 1e-6f);
  const nerf::CameraModel c = nerf::camera_from_fov_y(640, 480, 50.0f);
  EXPECT_EQ(c.width, 640u);
  EXPECT_FLOAT_EQ(c.cx, 320.0f);
  EXPECT_FLOAT_EQ(c.cy, 240.0f);
  EXPECT_FLOAT_EQ(c.fl_x, c.fl_y);
  EXPECT_NEAR(nerf::fov_y_degrees(c), 50.0f, 1e-4f);
  EXPECT_NE(test::error_of([] { nerf::camera_from_fov_y(640, 480, 180.0f); }).find("180 degree"), std::string::npos);
}

TEST(NerfCamera, CamerasOfATransformsFileForRendering) {
  const Json t = Json::parse(R"({"camera_angle_x": 0.69, "frames": [
      {"file_path": "a", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,2],[0,0,0,1]]},
      {"file_path": "b", "w": 64, "h": 32, "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,3],[0,0,0,1]]}]})");
  nerf::CameraModel fallback;
  fallback.width = 40, fallback.height = 30;
  const auto cams = nerf::cameras_from_transforms(t, "t.json", 0, 0, fallback);
  ASSERT_EQ(cams.size(), 2u);
  EXPECT_EQ(cams[0].camera.width, 40u);  // no size in the file: the fallback's
  EXPECT_EQ(cams[1].camera.width, 64u);
  EXPECT_NEAR(cams[1].camera.fl_x, nerf::focal_length(0.69f, 64), 1e-3f);
  EXPECT_FLOAT_EQ(cams[1].camera.cx, 32.0f);
  const auto sized = nerf::cameras_from_transforms(t, "t.json", 100, 50, fallback);
  EXPECT_EQ(sized[1].camera.width, 100u);
  const nerf::CameraModel r = nerf::resized_camera(cams[1].camera, 128, 64);
  EXPECT_FLOAT_EQ(r.fl_x, 2 * cams[1].camera.fl_x);  // the same field of view
  EXPECT_FLOAT_EQ(r.cy, 32.0f);
  EXPECT_NE(test::error_of([&] { nerf::cameras_from_transforms(t, "t.json", 0, 0, nerf::CameraModel{}); })
                .find("gives no image size"),
            std::string::npos);
}

TEST(NerfDataset, BlenderFolderWithCameraAngle) {
  const auto dir = test::fresh_dir("tessera_dataset_blender");
  test::write_procedural_scene(dir, 3, 2, 32);
  const nerf::Dataset d = nerf::load_dataset(dir.string(), {.split = "train"});
  ASSERT_EQ(d.frames.size(), 3u);
  const auto& c = d.frames[0].camera;
  EXPECT_EQ(c.width, 32u);
  EXPECT_EQ(c.height, 32u);
  EXPECT_NEAR(c.fl_x, 0.5f * 32 / std::tan(0.5f * 0.69f), 1e-3f);
  EXPECT_EQ(c.fl_y, c.fl_x);
  EXPECT_EQ(c.cx, 16.0f);
  EXPECT_EQ(d.frames[1].pixel_offset, 32u * 32u);
  EXPECT_EQ(d.rgba.size(), 3u * 32 * 32 * 4);
  EXPECT_EQ(d.aabb_scale, 1u);
  EXPECT_EQ(d.n_cascades, 1u);
  EXPECT_EQ(d.cone_angle, 0.0f);
  EXPECT_EQ(nerf::load_dataset(dir.string(), {.split = "test"}).frames.size(), 2u);
}

// "train+val" (here train+test, the splits the procedural scene has): the frames of each
// split in order, their pixels packed one after the other.
TEST(NerfDataset, SplitsJoinedByPlusLoadTheirUnion) {
  const auto dir = test::fresh_dir("tessera_dataset_union");
  test::write_procedural_scene(dir, 3, 2, 16);
  const nerf::Dataset train = nerf::load_dataset(dir.string(), {.split = "train"});
  const nerf::Dataset test = nerf::load_dataset(dir.string(), {.split = "test"});
  const nerf::Dataset both = nerf::load_dataset(dir.string(), {.split = "train+test"});
  ASSERT_EQ(both.frames.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto& want = i < 3 ? train.frames[i] : test.frames[i - 3];
    EXPECT_EQ(std::memcmp(&both.frames[i].c2w, &want.c2w, sizeof(want.c2w)), 0) << i;
    EXPECT_EQ(both.frames[i].pixel_offset, i * 16u * 16u) << i;
    EXPECT_EQ(both.images[i], i < 3 ? train.images[i] : test.images[i - 3]) << i;
  }
  std::vector<uint8_t> rgba = train.rgba;
  rgba.insert(rgba.end(), test.rgba.begin(), test.rgba.end());
  EXPECT_EQ(both.rgba, rgba);
  EXPECT_NE(error_of([&] { nerf::load_dataset(dir.string(), {.split = "train+train"}); }).find("names 'train' twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nerf::load_dataset(dir.string(), {.split = "train+tset"}); }).find("'tset' is not one of"),
            std::string::npos);
}

TEST(NerfDataset, InstantNgpTransformsWithEveryField) {
  const auto dir = test::fresh_dir("tessera_dataset_ngp");
  // images/a.jpg does not exist (skipped and counted)
  write_image(dir / "images" / "b.png", 8, 6);
  write_image(dir / "images" / "c.png", 8, 6);
  write_image(dir / "images" / "d.png", 10, 4);  // a different size, with its own intrinsics
  Json frames = Json::array();
  for (const char* name : {"images/a.jpg", "images/b", "images/c.png"})
    frames.push_back({{"file_path", name}, {"transform_matrix", kIdentityPose}});
  frames.push_back({{"file_path", "images/d.png"}, {"fl_x", 7.0}, {"w", 10}, {"h", 4}, {"transform_matrix", kIdentityPose}});
  write_json(dir / "transforms.json", {{"fl_x", 9.0}, {"fl_y", 9.5}, {"cx", 4.2}, {"cy", 2.9}, {"w", 8}, {"h", 6},
                                       {"k1", 0.01}, {"k2", -0.002}, {"p1", 0.001}, {"p2", 0.0005},
                                       {"aabb_scale", 4}, {"scale", 0.5}, {"offset", {0.5, 0.6, 0.7}},
                                       {"sharpness", 3}, {"frames", frames}});
  const nerf::Dataset d = nerf::load_dataset(dir.string(), {.split = "train"});
  EXPECT_EQ(d.skipped_frames, 1u);
  ASSERT_EQ(d.frames.size(), 3u);
  const auto& c = d.frames[0].camera;
  EXPECT_EQ(c.fl_x, 9.0f);
  EXPECT_EQ(c.fl_y, 9.5f);
  EXPECT_EQ(c.cx, 4.2f);
  EXPECT_EQ(c.cy, 2.9f);
  EXPECT_EQ(c.k1, 0.01f);
  EXPECT_EQ(c.k2, -0.002f);
  EXPECT_EQ(c.p1, 0.001f);
  EXPECT_EQ(c.p2, 0.0005f);
  EXPECT_EQ(d.frames[2].camera.width, 10u);
  EXPECT_EQ(d.frames[2].camera.fl_x, 7.0f);
  EXPECT_EQ(d.aabb_scale, 4u);
  EXPECT_EQ(d.n_cascades, 3u);
  EXPECT_EQ(d.cone_angle, 1.0f / 256);
  EXPECT_EQ(d.aabb.min.x, -1.5f);
  EXPECT_EQ(d.aabb.max.z, 2.5f);
  // instant-ngp's pose convention: y and z columns flipped, position scaled and offset,
  // then the axes cycled (x, y, z) <- (y, z, x).
  const auto& m = d.frames[0].c2w;
  const float pos[3] = {0.5f * 0.5f + 0.5f, -0.25f * 0.5f + 0.6f, 2.0f * 0.5f + 0.7f};
  EXPECT_FLOAT_EQ(m[0][3], pos[1]);
  EXPECT_FLOAT_EQ(m[1][3], pos[2]);
  EXPECT_FLOAT_EQ(m[2][3], pos[0]);
  EXPECT_FLOAT_EQ(m[2][0], 1.0f);   // x column (1, 0, 0) cycled
  EXPECT_FLOAT_EQ(m[0][1], -1.0f);  // y column (0, 1, 0) flipped and cycled
  EXPECT_FLOAT_EQ(m[1][2], -1.0f);  // z column (0, 0, 1) flipped and cycled
  // Holdout: every 2nd frame of the file is a test view.
  const nerf::Dataset test = nerf::load_dataset(dir.string(), {.split = "test", .holdout = 2});
  EXPECT_EQ(test.frames.size() + test.skipped_frames, 2u);
  EXPECT_NE(error_of([&] { nerf::load_dataset(dir.string(), {.split = "test"}); }).find("--holdout"),
            std::string::npos);
}

TEST(NerfDataset, DistortionRoundTripsAndBendsRays) {
  ops::nerf::CameraModel c{100, 100, 50, 50, -0.2f, 0.05f, 0.01f, -0.02f, 100, 100};
  for (float x : {-0.4f, -0.1f, 0.0f, 0.3f})
    for (float y : {-0.3f, 0.05f, 0.45f}) {
      float xd, yd, xu, yu;
      ops::nerf::distort(c, x, y, xd, yd);
      ops::nerf::undistort(c, xd, yd, xu, yu);
      EXPECT_NEAR(xu, x, 1e-5f);
      EXPECT_NEAR(yu, y, 1e-5f);
    }
  ops::nerf::FrameView f;
  f.camera = c;
  for (int i = 0; i < 3; ++i) f.c2w[i][i] = 1.0f;
  ops::nerf::FrameView pinhole = f;
  pinhole.camera.k1 = pinhole.camera.k2 = pinhole.camera.p1 = pinhole.camera.p2 = 0;
  const auto bent = ops::nerf::camera_ray(f, 95, 90), straight = ops::nerf::camera_ray(pinhole, 95, 90);
  EXPECT_GT(std::fabs(bent.dir.x - straight.dir.x), 1e-3f);
  const auto centre = ops::nerf::camera_ray(f, 50, 50);
  EXPECT_NEAR(centre.dir.z, 1.0f, 1e-6f);
}

TEST(NerfDataset, LensKeysSelectTheLensOrAreClearErrors) {
  const auto dir = test::fresh_dir("tessera_dataset_lens");
  write_image(dir / "a.png", 8, 8);
  const Json frame = {{"file_path", "a.png"}, {"transform_matrix", kIdentityPose}};
  auto load = [&](Json j) {
    j["fl_x"] = 9.0, j["frames"] = Json::array({frame});
    write_json(dir / "transforms.json", j);
    return nerf::load_dataset((dir / "transforms.json").string()).frames.at(0).camera;
  };
  auto error = [&](const Json& j) { return error_of([&] { load(j); }); };
  // instant-ngp's flag and nerfstudio's name: the equidistant fisheye with k1-k4.
  auto c = load({{"is_fisheye", true}, {"k1", 0.1}, {"k2", 0.02}, {"k3", 0.003}, {"k4", 0.0004}});
  EXPECT_EQ(c.lens, ops::nerf::Lens::fisheye);
  EXPECT_EQ(c.k3, 0.003f);
  EXPECT_EQ(c.k4, 0.0004f);
  EXPECT_EQ(load({{"camera_model", "OPENCV_FISHEYE"}}).lens, ops::nerf::Lens::fisheye);
  c = load({{"camera_model", "OPENCV"}, {"k1", 0.1}, {"k3", 0.01}});
  EXPECT_EQ(c.lens, ops::nerf::Lens::perspective);
  EXPECT_EQ(c.k3, 0.01f);
  c = load({{"camera_model", "FULL_OPENCV"}, {"k4", 0.1}, {"k5", 0.01}, {"k6", 0.001}});
  EXPECT_EQ(c.k6, 0.001f);
  // Never trained silently as something else.
  EXPECT_NE(error({{"camera_model", "EQUIRECTANGULAR"}}).find("EQUIRECTANGULAR\" is not supported"), std::string::npos);
  EXPECT_NE(error({{"k4", 0.01}}).find("ambiguous"), std::string::npos);
  EXPECT_NE(error({{"is_fisheye", true}, {"p1", 0.01}}).find("k1-k4 only"), std::string::npos);
  EXPECT_NE(error({{"is_fisheye", false}, {"camera_model", "OPENCV_FISHEYE"}}).find("contradicts"), std::string::npos);
  EXPECT_NE(error({{"is_fisheye", 1}}).find("true or false"), std::string::npos);
  // A calibration whose polynomial folds back inside the image (strong barrel at the corners).
  EXPECT_NE(error({{"k1", -0.5}}).find("folds back"), std::string::npos);
  EXPECT_EQ(load({{"k1", -0.1}}).k1, -0.1f);
}

TEST(NerfDataset, DynamicMasksMarkPixelsThatNeverTrain) {
  const auto dir = test::fresh_dir("tessera_dataset_masks");
  write_image(dir / "a.png", 4, 2);
  write_image(dir / "b.jpg.png", 4, 2);
  // a's mask: the right half (instant-ngp's name, beside the image); b has none.
  std::vector<uint8_t> mask(4 * 2 * 3, 0);
  for (int y = 0; y < 2; ++y)
    for (int x = 2; x < 4; ++x) mask[(y * 4 + x) * 3] = 255;
  write_png((dir / "dynamic_mask_a.png").string(), 4, 2, 3, mask);
  Json frames = Json::array();
  for (const char* name : {"a.png", "b.jpg.png"}) frames.push_back({{"file_path", name}, {"transform_matrix", kIdentityPose}});
  write_json(dir / "transforms.json", {{"fl_x", 5.0}, {"frames", frames}});
  const nerf::Dataset d = nerf::load_dataset(dir.string());
  EXPECT_EQ(d.masked_frames, 1u);
  ASSERT_EQ(d.mask.size(), 16u);
  EXPECT_EQ(d.mask, (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  // A union of splits keeps each frame's mask: b (train, no mask) then a (every 2nd frame held out).
  const nerf::Dataset u = nerf::load_dataset(dir.string(), {.split = "train+test", .holdout = 2});
  EXPECT_EQ(u.masked_frames, 1u);
  EXPECT_EQ(u.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1}));
  write_png((dir / "dynamic_mask_a.png").string(), 3, 2, 3, std::vector<uint8_t>(18, 255));
  EXPECT_NE(error_of([&] { nerf::load_dataset(dir.string()); }).find("is 3x2 but its image"), std::string::npos);
}

TEST(NerfDataset, BadScenesAreClearErrors) {
  const auto dir = test::fresh_dir("tessera_dataset_bad");
  write_image(dir / "a.png", 8, 8);
  write_image(dir / "b.png", 6, 6);
  auto load = [&](const Json& j) {
    write_json(dir / "transforms.json", j);
    return error_of([&] { nerf::load_dataset((dir / "transforms.json").string()); });
  };
  const Json ok_frame = {{"file_path", "a.png"}, {"transform_matrix", kIdentityPose}};
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"frames", {{{"file_path", "a.png"},
                                                         {"transform_matrix", Json::array({Json::array({1, 0, 0, 0}),
                                                                                           Json::array({2, 0, 0, 0}),
                                                                                           Json::array({0, 0, 1, 0}),
                                                                                           Json::array({0, 0, 0, 1})})}}}}})
                .find("singular"),
            std::string::npos);
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"frames", {ok_frame, {{"file_path", "b.png"}, {"transform_matrix", kIdentityPose}}}}})
                .find("different sizes need per-frame intrinsics"),
            std::string::npos);
  EXPECT_NE(load({{"fl_x", 5}, {"w", 10}, {"h", 8}, {"frames", {ok_frame}}}).find("w, h = 10x8"), std::string::npos);
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"aabb_scale", 3}, {"frames", {ok_frame}}}).find("power of two"),
            std::string::npos);
  EXPECT_NE(load({{"frames", {ok_frame}}}).find("no focal length"), std::string::npos);
  // Finite in double, infinite in float (the fuzzer's find): a clear error, not an inf pose.
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"frames", {{{"file_path", "a.png"},
                                                         {"transform_matrix", Json::array({Json::array({1, 0, 0, 1e300}),
                                                                                           Json::array({0, 1, 0, 0}),
                                                                                           Json::array({0, 0, 1, 0}),
                                                                                           Json::array({0, 0, 0, 1})})}}}}})
                .find("out of float range"),
            std::string::npos);
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"offset", {0, 1e300, 0}}, {"frames", {ok_frame}}}).find("offset"),
            std::string::npos);
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"frames", {{{"file_path", "a.png"}}}}}).find("transform_matrix"),
            std::string::npos);
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"frames", {{{"file_path", "missing.png"}, {"transform_matrix", kIdentityPose}}}}})
                .find("no frame of split 'train' has an image"),
            std::string::npos);
  EXPECT_NE(load({{"camera_angle_x", "wide"}, {"frames", {ok_frame}}}).find("camera_angle_x"), std::string::npos);
  std::ofstream(dir / "transforms.json") << "{\"frames\": [";
  const std::string msg = error_of([&] { nerf::load_dataset((dir / "transforms.json").string()); });
  EXPECT_NE(msg.find("transforms.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  // A scene path that is not there is named as a scene, not as some file that failed to open.
  const std::string missing = error_of([&] { nerf::load_dataset((dir / "nothing").string()); });
  EXPECT_NE(missing.find("scene '" + (dir / "nothing").string() + "' does not exist"), std::string::npos) << missing;
  std::ofstream(dir / "a.png") << "broken";
  EXPECT_NE(load({{"camera_angle_x", 0.7}, {"frames", {ok_frame}}}).find("a.png"), std::string::npos);
}

}  // namespace
}  // namespace tessera
