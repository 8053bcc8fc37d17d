// A model on a stream it is given (ModelTrainer::set_stream): on the CPU, a stream of the
// backend trains bit for bit as the default one does; a stream of another device is one
// clear error. The CUDA side (a caller's stream, captured into a graph) is in
// test_model_streams_cuda.cpp.
#include <gtest/gtest.h>

#include "support/errors.h"
#include "support/paths.h"
#include "support/random.h"
#include "support/views.h"
#include "tessera/core/backend.h"
#include "tessera/nn/model_trainer.h"

namespace tessera {
namespace {

std::unique_ptr<nn::ModelTrainer> trainer(Device device, uint64_t seed) {
  Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  cfg["loss"] = {{"otype", "L2"}};
  return nn::ModelTrainer::from_config(cfg, 2, 3, device, seed);
}

TEST(ModelStreams, AStreamOfTheBackendTrainsAsTheDefaultStream) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto on_default = trainer(DeviceKind::cpu, seed), on_side = trainer(DeviceKind::cpu, seed);
  auto side = backend_for(DeviceKind::cpu).create_stream();
  on_side->set_stream(*side);
  EXPECT_EQ(&on_side->stream(), side.get());
  EXPECT_EQ(&on_side->model().child(1)->stream(), side.get()) << "a composite hands its stream to its parts";
  on_side->set_fused_step(false);  // the general path: loss, settle and optimizer ops too
  on_default->set_fused_step(false);
  const size_t batch = 128;
  for (int step = 0; step < 3; ++step) {
    const auto x = test::random_floats(batch * 2, 0, 1, seed + step), y = test::random_floats(batch * 3, 0, 1, seed + 9);
    EXPECT_EQ(on_default->training_step(test::test_view(x, batch, 2), test::test_view(y, batch, 3)),
              on_side->training_step(test::test_view(x, batch, 2), test::test_view(y, batch, 3)));
  }
  const float* a = on_default->params().data<float>();
  EXPECT_TRUE(std::equal(a, a + on_default->n_params(), on_side->params().data<float>()));
}

TEST(ModelStreams, AStreamOfAnotherDeviceIsAClearError) {
  auto t = trainer(DeviceKind::cpu, 1);
  auto other = backend_for(Device::parse("cpu:1")).create_stream();
  const std::string e = test::error_of([&] { t->set_stream(*other); });
  EXPECT_NE(e.find("a stream of cpu:1 for a module on cpu"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
