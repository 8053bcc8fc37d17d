// A model trained on a caller's CUDA stream (as PyTorch's current stream) runs all of a
// training step there: a step captured into a CUDA graph under the global capture mode
// (which refuses any launch on the legacy default stream and any synchronization) works,
// and replaying the graph trains as the steps on the default stream do.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>

#include "support/gpu.h"
#include "support/paths.h"
#include "support/random.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/nn/model_trainer.h"

namespace tessera {
namespace {

constexpr size_t kBatch = 1 << 14;

Json config(bool grid) {
  Json c = load_json_file(test::source_path("configs/config_hash.json"));
  c["loss"] = {{"otype", "L2"}};
  if (!grid) c.erase("encoding");
  return c;
}

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// Two warm-up steps (buffers grow, optimizer state appears), one step captured on the
// caller's stream and replayed `replays` times, against the same steps on the default
// stream: the parameters agree bit for bit, or (exact = false) all but a few within 1e-3.
void expect_captured_steps_match(bool grid, bool fused, bool exact) {
  SCOPED_TRACE(std::string(grid ? "hash grid + MLP" : "MLP") + (fused ? ", fused step" : ", general path"));
  const Device dev = DeviceKind::cuda;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Buffer<float> x = make_buffer(dev, test::random_floats(kBatch * 2, 0, 1, seed));
  Buffer<float> y = make_buffer(dev, test::random_floats(kBatch * 3, 0, 1, seed + 1));
  const TensorView xv = x.matrix(kBatch, 2), yv = y.matrix(kBatch, 3);
  constexpr int kReplays = 3;

  auto reference = nn::ModelTrainer::from_config(config(grid), 2, 3, dev, seed);
  reference->set_fused_step(fused);
  for (int i = 0; i < 2 + kReplays; ++i) reference->training_step_async(xv, yv);
  std::vector<float> expected(reference->n_params());
  download_from_view(dev, expected.data(), reference->params(), expected.size() * sizeof(float));

  cudaStream_t mine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
  {
    auto stream = backend_for(dev).wrap_stream(mine);
    auto t = nn::ModelTrainer::from_config(config(grid), 2, 3, dev, seed);
    t->set_fused_step(fused);
    t->set_stream(*stream);
    for (int i = 0; i < 2; ++i) t->training_step_async(xv, yv);
    Graph g;
    ASSERT_EQ(cudaStreamBeginCapture(mine, cudaStreamCaptureModeGlobal), cudaSuccess);
    try {
      t->training_step_async(xv, yv);
    } catch (const Error& e) {
      cudaStreamEndCapture(mine, &g.graph);
      FAIL() << "a step on the caller's stream left it: " << e.what();
    }
    ASSERT_EQ(cudaStreamEndCapture(mine, &g.graph), cudaSuccess) << "work outside the caller's stream";
    ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);
    for (int i = 0; i < kReplays; ++i) ASSERT_EQ(cudaGraphLaunch(g.exec, mine), cudaSuccess);
    std::vector<float> got(t->n_params());
    download_from_view(*stream, got.data(), t->params(), got.size() * sizeof(float));
    ASSERT_EQ(got.size(), expected.size());
    double worst = 0;
    size_t far = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "parameter " << i;
      const double d = std::abs(double(got[i]) - expected[i]);
      worst = std::max(worst, d);
      far += d > 1e-3;
    }
    std::printf("[ measured ] captured steps vs default stream: max |param difference| %.2e, %zu of %zu above 1e-3\n",
                worst, far, got.size());
    if (exact) EXPECT_EQ(worst, 0.0);
    else EXPECT_LE(far, got.size() / 1000);
  }
  cudaStreamDestroy(mine);
}

TEST(ModelStreamsCuda, MlpStepsCapturedOnACallersStreamMatchBitForBit) {
  REQUIRE_CUDA();
  expect_captured_steps_match(false, true, true);
  expect_captured_steps_match(false, false, true);
}

// The grid's gradient is scattered with atomics (order-dependent in the last bits; Adam
// turns a near-zero gradient's sign into a full step), so a few table entries may differ.
TEST(ModelStreamsCuda, GridModelStepsCapturedOnACallersStreamMatch) {
  REQUIRE_CUDA();
  expect_captured_steps_match(true, true, false);
  expect_captured_steps_match(true, false, false);
}

}  // namespace
}  // namespace tessera
