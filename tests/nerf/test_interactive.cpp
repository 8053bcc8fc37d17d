// The interactive renderer's scheduling on a clock the test drives: a moving camera gets
// cheap frames sized to the frame time, a resting one a refined frame, training shares the
// time, slow viewers are skipped and viewers are served in turn.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/procedural_scene.h"
#include "tessera/nerf/interactive.h"
#include "tessera/nerf/trainer.h"

namespace tessera {
namespace {

struct Rig {
  double clock_ms = 0;
  std::unique_ptr<nerf::NerfTrainer> trainer;
  std::unique_ptr<nerf::InteractiveRenderer> renderer;
  std::vector<nerf::InteractiveFrame> sent;

  Rig() {
    // One folder per test: ctest runs the tests of this file side by side.
    const auto dir = std::filesystem::temp_directory_path() /
                     (std::string("tessera_interactive_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    test::write_procedural_scene(dir, 2, 1, 16);
    Json c = nerf::default_nerf_config();
    c["encoding"]["n_levels"] = 2;
    c["encoding"]["log2_hashmap_size"] = 14;
    trainer = std::make_unique<nerf::NerfTrainer>(c, nerf::load_dataset(dir.string()), DeviceKind::cpu, 1);
    nerf::InteractiveOptions o;
    o.clock_ms = [this] { return clock_ms; };
    renderer = std::make_unique<nerf::InteractiveRenderer>(*trainer, o);
  }
  // Each delivery "takes" 10 ms of the fake clock, so the per-pixel cost is known.
  bool next(const std::vector<nerf::ViewRequest>& views, bool budgeted) {
    return renderer->render_next(views, budgeted, [&](const nerf::InteractiveFrame& f) {
      clock_ms += 10;
      sent.push_back(f);
    });
  }
};

nerf::ViewRequest view(uint64_t id, uint64_t version) {
  nerf::ViewRequest v;
  v.viewer = id, v.camera_version = version, v.width = 32, v.height = 16, v.fov_y_degrees = 40;
  v.c2w[0][0] = v.c2w[1][1] = v.c2w[2][2] = 1;
  v.c2w[2][3] = -1.5f;
  return v;
}

TEST(InteractiveRenderer, MovingCamerasGetCheapFramesAndRestingOnesARefinedFrame) {
  Rig r;
  ASSERT_TRUE(r.next({view(1, 1)}, false));
  ASSERT_EQ(r.sent.size(), 1u);
  EXPECT_EQ(r.sent[0].camera.camera.width, 8u);  // the first frame: a quarter of the size
  EXPECT_FALSE(r.sent[0].refined);
  EXPECT_FALSE(r.next({view(1, 1)}, false));  // nothing new, not yet at rest
  r.clock_ms += 300;                           // at rest past the settle time
  ASSERT_TRUE(r.next({view(1, 1)}, false));
  EXPECT_TRUE(r.sent.back().refined);
  EXPECT_EQ(r.sent.back().camera.camera.width, 32u);
  EXPECT_FALSE(r.next({view(1, 1)}, false));  // refined, and not training: no refresh
  // Moving again: the frame is sized from the measured cost per pixel to fit the frame time.
  ASSERT_TRUE(r.next({view(1, 2)}, false));
  EXPECT_LT(r.sent.back().camera.camera.width, 32u);
  EXPECT_GE(r.sent.back().camera.camera.width, 3u);
  EXPECT_EQ(r.renderer->counters().frames, 3u);
  EXPECT_EQ(r.renderer->counters().refined_frames, 1u);
}

TEST(InteractiveRenderer, TrainingSharesTheTimeAndRefreshesRestingViews) {
  Rig r;
  r.renderer->set_training(true);
  ASSERT_TRUE(r.next({view(1, 1)}, true));  // nothing owed yet, but not below zero either
  EXPECT_FALSE(r.next({view(1, 2)}, true));   // the first frame's 10 ms are owed back
  r.renderer->earn(0.02);                     // 20 ms of training earn 5 ms at a 0.2 share
  EXPECT_FALSE(r.next({view(1, 2)}, true));
  r.renderer->earn(0.03);
  EXPECT_TRUE(r.next({view(1, 2)}, true));
  r.clock_ms += 300;
  r.renderer->earn(1.0);  // capped at one frame's time
  ASSERT_TRUE(r.next({view(1, 2)}, true));
  EXPECT_TRUE(r.sent.back().refined);
  r.renderer->earn(1.0);
  EXPECT_FALSE(r.next({view(1, 2)}, true));  // refined and fresh
  r.clock_ms += 1100;
  r.renderer->earn(1.0);
  EXPECT_TRUE(r.next({view(1, 2)}, true));  // refreshed while training
}

TEST(InteractiveRenderer, SlowViewersAreSkippedAndViewersTakeTurns) {
  Rig r;
  nerf::ViewRequest busy = view(1, 1);
  busy.frame_in_flight = true;
  ASSERT_TRUE(r.next({busy, view(2, 1)}, false));
  EXPECT_EQ(r.sent.back().viewer, 2u);
  ASSERT_TRUE(r.next({view(1, 1), view(2, 2)}, false));
  EXPECT_EQ(r.sent.back().viewer, 1u);  // after 2, the turn goes round to 1
  ASSERT_TRUE(r.next({view(1, 1), view(2, 2)}, false));
  EXPECT_EQ(r.sent.back().viewer, 2u);
}

}  // namespace
}  // namespace tessera
