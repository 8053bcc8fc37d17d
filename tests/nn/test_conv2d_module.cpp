// The Conv2d module on the CPU: a two-layer CNN (ReLU, then a strided layer on a
// non-square image) from a config, its parameter and input gradients against central finite
// differences in double-checked float, accumulate vs overwrite, strided input and output
// views, the config round trip and config errors.
#include <gtest/gtest.h>

#include <cmath>

#include "support/errors.h"
#include "support/random.h"
#include "support/views.h"
#include "tessera/nn/module.h"

namespace tessera {
namespace {

const Json kCnn = Json::parse(R"({"otype": "Sequential", "modules": [
  {"otype": "Conv2d", "n_input_channels": 2, "n_output_channels": 3, "kernel_size": 3, "padding": 1,
   "activation": "Tanh", "height": 5, "width": 7},
  {"otype": "Conv2d", "n_input_channels": 3, "n_output_channels": 2, "kernel_size": 3, "stride": 2,
   "padding": 1, "height": 5, "width": 7}]})");

struct Cnn {
  std::unique_ptr<nn::Module> model;
  std::vector<float> params, grads;
};

Cnn make_cnn(uint64_t seed) {
  Cnn c{nn::create_module(kCnn, 2 * 5 * 7, DeviceKind::cpu), {}, {}};
  c.params.assign(c.model->n_params(), 0.0f);
  c.grads.assign(c.model->n_params(), 0.0f);
  const nn::ParamBinding all{test::test_view(c.params), test::test_view(c.grads), TensorView()};
  c.model->bind_params(all, all.slice(0, 0));
  c.model->initialize(seed);
  // The bias starts at zero; give every parameter a value so each gradient is exercised.
  const auto values = test::random_floats(c.params.size(), -0.4f, 0.4f, seed + 1);
  c.params = values;
  return c;
}

using test::weighted_sum;

TEST(Conv2dModule, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Cnn c = make_cnn(seed);
  nn::Module& m = *c.model;
  ASSERT_EQ(m.input_width(), 70u);
  ASSERT_EQ(m.output_width(), 2u * 3 * 4);  // 5x7 at stride 2, pad 1: 3x4
  ASSERT_EQ(m.n_params(), (3u * 2 * 9 + 3) + (2u * 3 * 9 + 2));
  const size_t batch = 3;
  auto x = test::random_floats(batch * 70, -1.0f, 1.0f, seed + 2);
  const auto w = test::random_floats(batch * m.output_width(), -1.0f, 1.0f, seed + 3);
  std::vector<float> y(batch * m.output_width()), dx(x.size());
  auto ctx = m.forward(test::ptr_view(x.data(), batch, 70), test::ptr_view(y.data(), batch, m.output_width()));
  m.backward(*ctx, test::ptr_view(x.data(), batch, 70), test::ptr_view(w.data(), batch, m.output_width()),
             test::ptr_view(dx.data(), batch, 70), nn::GradientMode::overwrite);
  const float h = 1e-2f;
  auto central = [&](float& v) {
    const float keep = v;
    v = keep + h;
    const double up = weighted_sum(m, x, batch, w);
    v = keep - h;
    const double down = weighted_sum(m, x, batch, w);
    v = keep;
    return (up - down) / (2 * h);
  };
  for (size_t i = 0; i < c.params.size(); ++i)
    ASSERT_NEAR(c.grads[i], central(c.params[i]), 2e-3 * (1 + std::fabs(c.grads[i]))) << "parameter " << i;
  for (size_t i = 0; i < x.size(); i += 3) ASSERT_NEAR(dx[i], central(x[i]), 2e-3 * (1 + std::fabs(dx[i]))) << "x " << i;

  // Accumulate adds the same gradient again.
  const std::vector<float> once = c.grads;
  ctx = m.forward(test::ptr_view(x.data(), batch, 70), test::ptr_view(y.data(), batch, m.output_width()));
  m.backward(*ctx, test::ptr_view(x.data(), batch, 70), test::ptr_view(w.data(), batch, m.output_width()), nn::View(),
             nn::GradientMode::accumulate);
  for (size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(c.grads[i], 2 * once[i], 1e-5 * (1 + std::fabs(once[i]))) << i;
}

TEST(Conv2dModule, StridedViewsGiveTheSameNumbers) {
  const uint64_t seed = test::fresh_seed();
  Cnn c = make_cnn(seed);
  nn::Module& m = *c.model;
  const size_t batch = 2, out_w = m.output_width();
  const auto x = test::random_floats(batch * 70, -1.0f, 1.0f, seed + 2);
  std::vector<float> y(batch * out_w);
  m.inference(test::ptr_view(x.data(), batch, 70), test::ptr_view(y.data(), batch, out_w));
  // The input as columns [1, 71) of a wider matrix, the output likewise.
  std::vector<float> wide_in(batch * 75, 9.0f), wide_out(batch * (out_w + 4), 9.0f);
  for (size_t r = 0; r < batch; ++r)
    for (size_t j = 0; j < 70; ++j) wide_in[r * 75 + 1 + j] = x[r * 70 + j];
  m.inference(TensorView::of_matrix(wide_in.data() + 1, batch, 70, 75),
              TensorView::of_matrix(wide_out.data() + 2, batch, out_w, out_w + 4));
  for (size_t r = 0; r < batch; ++r) {
    for (size_t j = 0; j < out_w; ++j) ASSERT_EQ(wide_out[r * (out_w + 4) + 2 + j], y[r * out_w + j]);
    EXPECT_EQ(wide_out[r * (out_w + 4)], 9.0f);  // columns outside the view untouched
  }
}

TEST(Conv2dModule, ConfigRoundTripsAndErrorsSayWhat) {
  Cnn c = make_cnn(1);
  const Json config = c.model->config();
  EXPECT_EQ(config["modules"][1]["stride"], 2);
  EXPECT_EQ(config["modules"][0]["activation"], "Tanh");
  auto again = nn::create_module(config, 70, DeviceKind::cpu);
  EXPECT_EQ(again->config(), config);
  EXPECT_EQ(again->n_params(), c.model->n_params());
  // A square image needs no height or width.
  auto square = nn::create_module(Json::parse(R"({"otype": "Conv2d", "n_input_channels": 3, "n_output_channels": 4,
                                                   "padding": 1})"),
                                  3 * 8 * 8, DeviceKind::cpu);
  EXPECT_EQ(square->output_width(), 4u * 8 * 8);
  auto error = [](const char* text, uint32_t width) {
    return test::error_of([&] { nn::create_module(Json::parse(text), width, DeviceKind::cpu); });
  };
  EXPECT_NE(error(R"({"otype": "Conv2d", "n_input_channels": 2, "n_output_channels": 4})", 2 * 5 * 7).find("square"),
            std::string::npos);
  EXPECT_NE(error(R"({"otype": "Conv2d", "n_input_channels": 3, "n_output_channels": 4})", 70).find("whole images"),
            std::string::npos);
  EXPECT_NE(error(R"({"otype": "Conv2d", "n_input_channels": 1, "n_output_channels": 4, "kernel_sise": 3})", 64)
                .find("kernel_sise"),
            std::string::npos);
  EXPECT_NE(error(R"({"otype": "Conv2d", "n_input_channels": 1, "n_output_channels": 4, "kernel_size": 5})", 9)
                .find("does not fit"),
            std::string::npos);
  EXPECT_NE(error(R"({"otype": "Conv2d", "n_input_channels": 1, "n_output_channels": 4, "algo": "fft"})", 64)
                .find("winograd_2x2"),
            std::string::npos);
  EXPECT_NE(error(R"({"otype": "Conv2d", "n_input_channels": 1, "n_output_channels": 4, "activation": "SiLU"})", 64)
                .find("SiLU"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
