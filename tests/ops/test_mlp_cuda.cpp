// The CUDA fully fused MLP against the CPU reference, on fresh random data: forward,
// loss-in-kernel training gradients, upstream-gradient backward (input and weight
// gradients), and the optimizer kernels. Tolerances are relative L2 errors
// (||cuda - cpu|| / ||cpu||), set to the worst case measured on an H100 times a margin;
// each test prints what it measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "support/bound_module.h"
#include "support/gpu.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/core/rng.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"
#include "tessera/ops/train_state.h"
#include "support/views.h"

namespace tessera {
namespace {

using test::rel_error;


// Input gradients are measured against max(|dx|, 0.1 x the cancellation-free scale), see
// rel_error_with_scale: a batch-1, one-input case once gave 0.13 plain relative error
// (seed 1613731602) because its single gradient was a near-cancelling sum.
// Measured worst cases on an H200/H100 (2026-11-22) times a margin: forward 6e-4 -> 5e-3.
// Gradients through smooth activations: 7.4e-4 typical, 5.4e-3 for the single-element
// input gradient at batch 1 (one fp16-rounded sum, no averaging) -> 1.5e-2. Through ReLU/LeakyReLU the fp16
// pre-activation flips sign near 0 for some samples, which flips their derivative:
// 4.7e-2 (b127, ReLU hidden + Tanh output) -> 0.1.
constexpr double kForwardTol = 5e-3;
constexpr double kSmoothGradTol = 1.5e-2;
constexpr double kKinkGradTol = 0.1;

float to_half_precision(float x) { return static_cast<float>(static_cast<_Float16>(x)); }


// ||got - want|| / max(||want||, kCancellationFloor * ||scale||).
constexpr double kCancellationFloor = 0.1;
double rel_error_with_scale(const std::vector<float>& got, const std::vector<float>& want,
                            const std::vector<float>& scale) {
  double num = 0, den = 0, sc = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += std::pow(double(got[i]) - want[i], 2);
    den += std::pow(double(want[i]), 2);
    sc += std::pow(double(scale[i]), 2);
  }
  const double d = std::max(std::sqrt(den), kCancellationFloor * std::sqrt(sc));
  return d > 0 ? std::sqrt(num) / d : std::sqrt(num);
}

// dL/dinput of the CPU network with every weight and upstream gradient made positive:
// the size the input gradient would have without cancellation.
std::vector<float> cancellation_free_input_gradient(test::BoundModule& cpu, const std::vector<float>& x,
                                                    const std::vector<float>& dL_dout, size_t batch) {
  std::vector<float> keep(cpu.params().data<float>(), cpu.params().data<float>() + cpu.n_params());
  for (size_t i = 0; i < keep.size(); ++i) cpu.params().data<float>()[i] = std::abs(keep[i]);
  cpu.params_changed();
  std::vector<float> abs_dout(dL_dout.size()), dx(batch * cpu.input_width()), y(batch * cpu.output_width());
  for (size_t i = 0; i < dL_dout.size(); ++i) abs_dout[i] = std::abs(dL_dout[i]);
  const TensorView in = test::in_view(cpu, x.data(), batch);
  auto ctx = cpu->forward(in, test::out_view(cpu, y.data(), batch));
  cpu->backward(*ctx, in, test::out_view(cpu, abs_dout.data(), batch), test::in_view(cpu, dx.data(), batch), ops::GradientMode::overwrite);
  std::copy(keep.begin(), keep.end(), cpu.params().data<float>());
  cpu.params_changed();
  for (auto& v : dx) v = std::abs(v);
  return dx;
}

struct Case {
  uint32_t in, width, hidden, out;
  Activation act_hidden, act_output;
  size_t batch;
};

double grad_tolerance(const Case& c) {
  auto kink = [](Activation a) { return a == Activation::ReLU || a == Activation::LeakyReLU; };
  return kink(c.act_hidden) || kink(c.act_output) ? kKinkGradTol : kSmoothGradTol;
}

std::string name_of(const Case& c) {
  return fmt::format("in{}_w{}_h{}_out{}_{}_{}_b{}", c.in, c.width, c.hidden, c.out, to_string(c.act_hidden),
                     to_string(c.act_output), c.batch);
}

// Each case runs three ways: "auto" (the mma kernel where the weights fit in shared
// memory; weight gradients by GEMM for width 128 from 2^14 rows), the WMMA fallback, and
// weight gradients by GEMM at any width and batch ("gemm_dw"; the mma kernel where it
// fits), named through FusedMlpOptions.
class FusedMlpVsCpu : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

ops::FusedMlpOptions options_for(const std::string& mode) {
  ops::FusedMlpOptions o;
  if (mode == "wmma") o.kernel = ops::FusedMlpKernel::wmma;
  if (mode == "gemm_dw") o.weight_grads = ops::FusedWeightGrads::gemm;
  return o;
}

struct Pair {
  test::BoundModule cpu, gpu;
};

Pair make_pair(const Case& c, uint64_t seed, const ops::FusedMlpOptions& options = {}) {
  const Json cfg{{"otype", "FullyFusedMLP"}, {"n_neurons", c.width}, {"n_hidden_layers", c.hidden},
                 {"activation", to_string(c.act_hidden)}, {"output_activation", to_string(c.act_output)}};
  Pair p{test::make_mlp(cfg, c.in, c.out, DeviceKind::cpu), test::make_mlp(cfg, c.in, c.out, DeviceKind::cuda)};
  p.gpu.mlp().set_kernel_options(options);
  p.cpu->initialize(seed);
  // Both networks use weights that fp16 represents exactly, so the comparison measures
  // the kernel's arithmetic, not the rounding of the weights.
  std::vector<float> w(p.cpu.params().data<float>(), p.cpu.params().data<float>() + p.cpu.n_params());
  for (auto& x : w) x = to_half_precision(x);
  std::copy(w.begin(), w.end(), p.cpu.params().data<float>());
  detail::copy_bytes(DeviceKind::cuda, p.gpu.params().data<float>(), w.data(), w.size() * sizeof(float), true, false);
  p.gpu.params_changed();
  return p;
}

// The step state a trainer owns (loss scale, skip flag, last loss), bound to a standalone
// network so the test can read it. A backward no longer settles its step (the trainer
// does): settle() does it as ModelTrainer does, so an overflowing fp16 backward is skipped
// and halves the loss scale.
struct StepState {
  explicit StepState(test::BoundModule& m) : device(m->device()), state(device, 1) {
    state.copy_from_host({ops::TrainState{}});
    m->bind_train_state(state.view());
  }
  void settle(const TensorView& grads) { ops::call<ops::SettleStep>(device, grads, state.view()); }
  ops::TrainState read() const { return state.to_host()[0]; }

  Device device;
  Buffer<ops::TrainState> state;
};

std::vector<float> random_input(size_t n, uint64_t seed) {
  auto v = test::random_floats(n, -1.0f, 1.0f, seed);
  for (auto& x : v) x = to_half_precision(x);
  return v;
}

TEST_P(FusedMlpVsCpu, ForwardBackwardAndLossMatchReference) {
  REQUIRE_CUDA();
  test::unless_the_gpu_cannot([&] {
    const Case c = std::get<0>(GetParam());
    const std::string kernel = std::get<1>(GetParam());
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << name_of(c) << " kernel " << kernel << " seed " << seed);
    Pair p = make_pair(c, seed, options_for(kernel));
    StepState cpu_state(p.cpu), gpu_state(p.gpu);
    const size_t B = c.batch;
    const auto x = random_input(B * c.in, seed + 1);
    const auto dL_dout = test::random_floats(B * c.out, -1.0f, 1.0f, seed + 3);
    Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gd = make_buffer(DeviceKind::cuda, dL_dout),
                  gy(DeviceKind::cuda, B * c.out), gdx(DeviceKind::cuda, B * c.in);

    // Inference. Outputs are poisoned first so unwritten elements show.
    std::vector<float> y_cpu(B * c.out);
    p.cpu->inference(test::in_view(*p.cpu, x.data(), B), test::out_view(*p.cpu, y_cpu.data(), B));
    // Random targets, none within 0.25 of its output: the in-kernel loss's gradient
    // 2 (y - target) must not amplify the fp16 forward error (a target within 5e-4 of y made
    // it 2 %).
    auto target = test::random_floats(B * c.out, -1.0f, 1.0f, seed + 2);
    for (size_t i = 0; i < target.size(); ++i)
      if (std::abs(target[i] - y_cpu[i]) < 0.25f) target[i] = y_cpu[i] + (target[i] < y_cpu[i] ? -0.25f : 0.25f);
    Buffer<float> gt = make_buffer(DeviceKind::cuda, target);
    std::vector<float> poison(B * c.out, NAN);
    gy.copy_from_host(poison);
    p.gpu->inference(test::in_view(*p.gpu, gx.data(), B), test::out_view(*p.gpu, gy.data(), B));
    const double e_fwd = rel_error(gy.to_host(), y_cpu);

    // Upstream-gradient backward: weight and input gradients. The forwards' outputs go to
    // scratch (y_fwd_cpu, gy): the forward is compared through inference above.
    std::vector<float> dx_cpu(B * c.in), y_fwd_cpu(B * c.out);
    const TensorView x_cpu = test::in_view(*p.cpu, x.data(), B), x_gpu = test::in_view(*p.gpu, gx.data(), B);
    auto ctx = p.cpu->forward(x_cpu, test::out_view(*p.cpu, y_fwd_cpu.data(), B));
    p.cpu->backward(*ctx, x_cpu, test::out_view(*p.cpu, dL_dout.data(), B), test::in_view(*p.cpu, dx_cpu.data(), B), ops::GradientMode::overwrite);
    std::vector<float> g_cpu(p.cpu.gradients().data<float>(), p.cpu.gradients().data<float>() + p.cpu.n_params());
    gdx.copy_from_host(std::vector<float>(B * c.in, NAN));
    auto gctx = p.gpu->forward(x_gpu, test::out_view(*p.gpu, gy.data(), B));
    // A step whose fp16 backward overflows is skipped and the loss scale halves (e.g.
    // Exponential activations on random weights); repeat until the scale fits.
    for (int attempt = 0; attempt < 12; ++attempt) {
      p.gpu->backward(*gctx, x_gpu, test::out_view(*p.gpu, gd.data(), B), test::in_view(*p.gpu, gdx.data(), B), ops::GradientMode::overwrite);
      gpu_state.settle(p.gpu.gradients());
      if (!gpu_state.read().skip_this_step) break;
    }
    std::vector<float> g_gpu(p.gpu.n_params());
    detail::copy_bytes(DeviceKind::cuda, g_gpu.data(), p.gpu.gradients().data<float>(), g_gpu.size() * sizeof(float), false, true);
    const double e_wgrad = rel_error(g_gpu, g_cpu);
    // An input gradient can be a sum of terms that nearly cancel (batch 1, one input): fp16
    // error is relative to the terms, not to their small sum. Measure it against the
    // cancellation-free scale (the same backward with |weights| and |dL/doutput|) where
    // that is much larger than the gradient itself.
    const std::vector<float> dx_scale = cancellation_free_input_gradient(p.cpu, x, dL_dout, B);
    const double e_dx = rel_error_with_scale(gdx.to_host(), dx_cpu, dx_scale);

    // Accumulate mode doubles the gradient.
    p.gpu->backward(*gctx, x_gpu, test::out_view(*p.gpu, gd.data(), B), test::in_view(*p.gpu, nullptr, B), ops::GradientMode::accumulate);
    std::vector<float> g_acc(p.gpu.n_params());
    detail::copy_bytes(DeviceKind::cuda, g_acc.data(), p.gpu.gradients().data<float>(), g_acc.size() * sizeof(float), false, true);
    std::vector<float> twice(g_gpu.size());
    for (size_t i = 0; i < twice.size(); ++i) twice[i] = 2 * g_gpu[i];
    const double e_acc = rel_error(g_acc, twice);

    // Loss inside the kernel (L2), with input gradient; the step settles itself. It gives
    // no output: the forward is compared through inference above.
    const LossParams loss{LossKind::L2, 0.1f};
    std::vector<float> dx2_cpu(B * c.in);
    p.cpu.mlp().fused_training_step(x_cpu, test::out_view(*p.cpu, target.data(), B), loss, test::in_view(*p.cpu, dx2_cpu.data(), B));
    std::vector<float> g2_cpu(p.cpu.gradients().data<float>(), p.cpu.gradients().data<float>() + p.cpu.n_params());
    const float loss_cpu = cpu_state.read().last_loss;
    for (int attempt = 0; attempt < 12; ++attempt) {
      p.gpu.mlp().fused_training_step(x_gpu, test::out_view(*p.gpu, gt.data(), B), loss, test::in_view(*p.gpu, gdx.data(), B));
      if (!gpu_state.read().skip_this_step) break;
    }
    std::vector<float> g2_gpu(p.gpu.n_params());
    detail::copy_bytes(DeviceKind::cuda, g2_gpu.data(), p.gpu.gradients().data<float>(), g2_gpu.size() * sizeof(float), false, true);
    const double e_loss_grad = rel_error(g2_gpu, g2_cpu);
    // the in-kernel loss's upstream gradient (L2, mean), at the CPU output y_cpu (the same
    // parameters, so the training forward's output)
    std::vector<float> dL2(B * c.out);
    for (size_t i = 0; i < dL2.size(); ++i) dL2[i] = 2.0f * (y_cpu[i] - target[i]) / float(B * c.out);
    const double e_loss_dx =
        rel_error_with_scale(gdx.to_host(), dx2_cpu, cancellation_free_input_gradient(p.cpu, x, dL2, B));
    const auto state = gpu_state.read();
    const float loss_gpu = state.last_loss;

    std::printf("[measured] %s %s fwd %.2e wgrad %.2e dx %.2e acc %.2e | loss-path wgrad %.2e dx %.2e loss %.6g/%.6g\n",
                kernel.c_str(), name_of(c).c_str(), e_fwd, e_wgrad, e_dx, e_acc, e_loss_grad, e_loss_dx, loss_gpu, loss_cpu);
    const double grad_tol = grad_tolerance(c);
    EXPECT_LT(e_fwd, kForwardTol);
    EXPECT_LT(e_wgrad, grad_tol);
    EXPECT_LT(e_dx, grad_tol);
    EXPECT_LT(e_acc, 1e-6);
    EXPECT_LT(e_loss_grad, grad_tol);
    EXPECT_LT(e_loss_dx, grad_tol);
    EXPECT_NEAR(loss_gpu, loss_cpu, 2 * kForwardTol * std::abs(loss_cpu) + 1e-6);
    EXPECT_EQ(state.skip_this_step, 0u) << "gradients still not finite after the loss scale backed off";
  });
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const Activation all[] = {Activation::None, Activation::ReLU, Activation::LeakyReLU, Activation::Sigmoid,
                            Activation::Tanh, Activation::Softplus, Activation::Exponential, Activation::SiLU,
                            Activation::Sine};
  // every activation, hidden and output, at width 64 with odd widths and batch
  for (Activation a : all) v.push_back({5, 64, 2, 3, a, Activation::None, 1000});
  for (Activation a : all) v.push_back({3, 32, 2, 7, Activation::ReLU, a, 127});
  // every width, several depths, odd in/out widths and batches
  v.push_back({1, 16, 1, 1, Activation::Tanh, Activation::Sigmoid, 1});
  v.push_back({37, 16, 4, 19, Activation::ReLU, Activation::None, 127});
  v.push_back({32, 32, 8, 16, Activation::SiLU, Activation::None, 1000});
  v.push_back({17, 128, 3, 5, Activation::ReLU, Activation::None, 1000});
  v.push_back({64, 128, 8, 33, Activation::Sine, Activation::None, 127});
  v.push_back({32, 64, 2, 16, Activation::ReLU, Activation::None, (size_t(1) << 18) + 3});
  // width 64, 2-4 hidden layers (as the w64 h2 cases above): weight gradients in the
  // dW-only warps' registers (even depth: the dZ buffers alternate between tiles; layer 0
  // 16 wide: its units split by rows)
  v.push_back({32, 64, 4, 16, Activation::ReLU, Activation::None, (size_t(1) << 17) + 5});
  v.push_back({13, 64, 3, 29, Activation::Tanh, Activation::None, 1000});
  // width 64 past the register share (layer 0 48 wide, 4 hidden-to-hidden layers): the
  // L2 accumulators' RED units
  v.push_back({40, 64, 5, 8, Activation::ReLU, Activation::None, 1000});
  v.push_back({3, 128, 2, 3, Activation::Sigmoid, Activation::Sigmoid, (size_t(1) << 18) + 3});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Configs, FusedMlpVsCpu,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Values("auto", "wmma", "gemm_dw")),
                         [](const auto& info) {
                           return name_of(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// The register placement of the weight gradients is what the w64 h2-h4 cases above test:
// the plan must take it there, and only where a warp's share fits.
TEST(FusedMlpCuda, Width64DeepNetsKeepWeightGradientsInRegistersWhereTheyFit) {
  REQUIRE_CUDA();
  auto info = [](uint32_t in, uint32_t hidden, uint32_t out, bool training = true) {
    const MlpShape shape{in, 64, hidden, out};
    return ops::call<ops::FusedMlpLaunchInfo>(DeviceKind::cuda, shape, ops::MlpActivations{}, size_t(1) << 20,
                                              training, ops::FusedMlpOptions{});
  };
  // Where the plan takes them is tuned on Hopper's 227 KB per block; on smaller GPUs (or
  // their profiles) more warps per SM without register accumulators can score higher.
  if (cuda_devices().at(0).shared_memory_per_block_optin >= 200 * 1024) {
    EXPECT_TRUE(info(32, 4, 16).grads_in_registers);
    EXPECT_TRUE(info(5, 2, 3).grads_in_registers);
    EXPECT_TRUE(info(13, 3, 29).grads_in_registers);
  }
  EXPECT_FALSE(info(32, 4, 16, false).grads_in_registers) << "inference has no gradients";
  EXPECT_FALSE(info(64, 4, 16).grads_in_registers) << "layer 0 of 64 x 64 is past a warp's register share";
  EXPECT_FALSE(info(40, 4, 8).grads_in_registers) << "layer 0 of 64 x 48 is past a warp's register share";
  EXPECT_FALSE(info(32, 6, 16).grads_in_registers) << "five hidden-to-hidden layers are past a warp's register share";
}

TEST(FusedMlpCuda, TrainingLearnsLikeTheCpuReferenceAndSkipsNonFiniteSteps) {
  REQUIRE_CUDA();
  const Json cfg{{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 2}}},
                 {"loss", {{"otype", "L2"}}},
                 {"optimizer", {{"otype", "Adam"}, {"learning_rate", 1e-2}}}};
  auto t = nn::ModelTrainer::from_config(cfg, 2, 1, DeviceKind::cuda);
  auto ref = nn::ModelTrainer::from_config(cfg, 2, 1, DeviceKind::cpu);
  const size_t B = 4096;
  auto x = test::random_floats(B * 2, -1, 1, 5);
  std::vector<float> y(B);
  for (size_t i = 0; i < B; ++i) y[i] = std::sin(3 * x[2 * i]) * x[2 * i + 1];
  Buffer<float> dx = make_buffer(DeviceKind::cuda, x), dy = make_buffer(DeviceKind::cuda, y);
  const float first = t->training_step(test::in_view(t->model(), dx.data(), B), test::out_view(t->model(), dy.data(), B));
  ref->training_step(test::in_view(ref->model(), x.data(), B), test::out_view(ref->model(), y.data(), B));
  for (int i = 0; i < 500; ++i) {
    t->training_step_async(test::in_view(t->model(), dx.data(), B), test::out_view(t->model(), dy.data(), B));
    ref->training_step(test::in_view(ref->model(), x.data(), B), test::out_view(ref->model(), y.data(), B));
  }
  const float last = t->last_loss(), last_ref = ref->last_loss();
  std::printf("[measured] training: first loss %.4g, after 500 steps cuda %.4g, cpu %.4g\n", first, last, last_ref);
  EXPECT_LT(last, 0.1f * first);
  EXPECT_LT(last, 2.0f * last_ref + 1e-4f) << "fp16 training should track the fp32 reference";
  // an infinite input poisons the gradient: the step is skipped and the weights survive
  std::vector<float> before(t->n_params());
  detail::copy_bytes(DeviceKind::cuda, before.data(), t->params().data<float>(), before.size() * 4, false, true);
  x[0] = INFINITY;
  dx.copy_from_host(x);
  t->training_step(test::in_view(t->model(), dx.data(), B), test::out_view(t->model(), dy.data(), B));
  EXPECT_EQ(t->skipped_steps(), 1u);
  std::vector<float> after(before.size());
  detail::copy_bytes(DeviceKind::cuda, after.data(), t->params().data<float>(), after.size() * 4, false, true);
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// fp16 input straight into the kernel must compute exactly what fp32 input rounded to
// fp16 computes (the kernel rounds fp32 input the same way), for inference and training.
TEST(FusedMlpCuda, HalfInputMatchesRoundedFloatInputExactly) {
  REQUIRE_CUDA();
  for (uint32_t width : {32u, 64u, 128u}) {
    const Json cfg{{"otype", "FullyFusedMLP"}, {"n_neurons", width}, {"n_hidden_layers", 2}};
    test::BoundModule net = test::make_mlp(cfg, 32, 5, DeviceKind::cuda);
    const size_t batch = 3001;
    if (!net.mlp().accepts_half_input(batch, true)) continue;  // forced wmma kernel
    const uint64_t seed = test::fresh_seed();
    auto x = test::random_floats(batch * 32, -1, 1, seed);
    std::vector<uint16_t> xh(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xh[i] = test::half_bits(x[i]);
      x[i] = test::from_half_bits(xh[i]);
    }
    auto target = test::random_floats(batch * 5, -1, 1, seed + 1);
    Buffer<float> dx = make_buffer(DeviceKind::cuda, x), dt = make_buffer(DeviceKind::cuda, target);
    Buffer<uint16_t> dxh = make_buffer(DeviceKind::cuda, xh);
    Buffer<float> y1(DeviceKind::cuda, batch * 5), y2(DeviceKind::cuda, batch * 5);
    net->inference(test::in_view(net, dx.data(), batch), test::out_view(net, y1.data(), batch));
    net->inference(test::in_view(net, dxh.data(), batch), test::out_view(net, y2.data(), batch));
    EXPECT_EQ(y1.to_host(), y2.to_host()) << "width " << width;
    const LossParams loss{LossKind::L2, 0.1f};
    Buffer<float> g1(DeviceKind::cuda, batch * 32), g2(DeviceKind::cuda, batch * 32);
    net.mlp().fused_training_step(test::in_view(net, dx.data(), batch), test::out_view(net, dt.data(), batch), loss, test::in_view(net, g1.data(), batch));
    Buffer<float> grads1(DeviceKind::cuda, net.n_params());
    detail::copy_bytes(DeviceKind::cuda, grads1.data(), net.gradients().data<float>(), net.n_params() * 4, true, true);
    net.mlp().fused_training_step(test::in_view(net, dxh.data(), batch), test::out_view(net, dt.data(), batch), loss, test::in_view(net, g2.data(), batch));
    std::vector<float> a(net.n_params()), b(net.n_params());
    detail::copy_bytes(DeviceKind::cuda, a.data(), grads1.data(), a.size() * 4, false, true);
    detail::copy_bytes(DeviceKind::cuda, b.data(), net.gradients().data<float>(), b.size() * 4, false, true);
    EXPECT_EQ(a, b) << "width " << width;
    EXPECT_EQ(g1.to_host(), g2.to_host()) << "width " << width;
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// "MLP" networks of any width run layer by layer on the tensor-core GEMM on CUDA (Tanh
// hidden layers: activation and derivative in the GEMM epilogue; Sigmoid output: the
// separate pass): they match the CPU reference closely and train.
TEST(GemmMlpCuda, MatchesCpuAndTrains) {
  REQUIRE_CUDA();
  for (uint32_t width : {48u, 256u}) {
    const Json cfg{{"otype", "MLP"}, {"n_neurons", width}, {"n_hidden_layers", 3}, {"activation", "Tanh"},
                   {"output_activation", "Sigmoid"}};
    auto gpu = test::make_mlp(cfg, 7, 3, DeviceKind::cuda);
    auto cpu = test::make_mlp(cfg, 7, 3, DeviceKind::cpu);
    const uint64_t seed = test::fresh_seed();
    const size_t batch = 1001;
    // Weights and inputs fp16 represents exactly (the GPU computes in fp16 on tensor cores),
    // so the comparison measures the fp16 activations and the arithmetic, not weight rounding.
    cpu->initialize(seed);
    std::vector<float> w(cpu.params().data<float>(), cpu.params().data<float>() + cpu.n_params());
    for (auto& v : w) v = to_half_precision(v);
    std::copy(w.begin(), w.end(), cpu.params().data<float>());
    detail::copy_bytes(DeviceKind::cuda, gpu.params().data<float>(), w.data(), w.size() * sizeof(float), true, false);
    gpu.params_changed();
    auto x = random_input(batch * 7, seed);
    auto dL = test::random_floats(batch * 3, -1, 1, seed + 1);
    Buffer<float> dx = make_buffer(DeviceKind::cuda, x), ddL = make_buffer(DeviceKind::cuda, dL);
    Buffer<float> dy(DeviceKind::cuda, batch * 3), ddin(DeviceKind::cuda, batch * 7);
    std::vector<float> y(batch * 3), din(batch * 7);
    cpu->inference(test::in_view(*cpu, x.data(), batch), test::out_view(*cpu, y.data(), batch));
    gpu->inference(test::in_view(*gpu, dx.data(), batch), test::out_view(*gpu, dy.data(), batch));
    const double e_fwd = rel_error(dy.to_host(), y);
    // The forwards write y and dy again (compared above).
    auto cctx = cpu->forward(test::in_view(*cpu, x.data(), batch), test::out_view(*cpu, y.data(), batch));
    cpu->backward(*cctx, test::in_view(*cpu, x.data(), batch), test::out_view(*cpu, dL.data(), batch), test::in_view(*cpu, din.data(), batch), ops::GradientMode::overwrite);
    auto gctx = gpu->forward(test::in_view(*gpu, dx.data(), batch), test::out_view(*gpu, dy.data(), batch));
    gpu->backward(*gctx, test::in_view(*gpu, dx.data(), batch), test::out_view(*gpu, ddL.data(), batch), test::in_view(*gpu, ddin.data(), batch), ops::GradientMode::overwrite);
    std::vector<float> gg(gpu.n_params());
    detail::copy_bytes(DeviceKind::cuda, gg.data(), gpu.gradients().data<float>(), gg.size() * 4, false, true);
    const double e_w = rel_error(gg, std::vector<float>(cpu.gradients().data<float>(), cpu.gradients().data<float>() + cpu.n_params()));
    const double e_x = rel_error(ddin.to_host(), din);
    std::printf("[ measured ] MLP w%u: forward %.2e, weight grads %.2e, input grads %.2e\n", width, e_fwd, e_w, e_x);
    // Measured on the H100: forward ~5e-5, gradients ~3.5e-4 to 4.6e-4 (fp16 activations).
    EXPECT_LT(e_fwd, 5e-4);
    EXPECT_LT(e_w, 3e-3);
    EXPECT_LT(e_x, 3e-3);
  }
  // Training on CUDA tracks the CPU trainer step for step (same data, same init).
  const Json tcfg{{"network", {{"otype", "CutlassMLP"}, {"n_neurons", 192}, {"n_hidden_layers", 2}}},
                  {"loss", {{"otype", "L2"}}},
                  {"optimizer", {{"otype", "Adam"}, {"learning_rate", 1e-3}}}};
  auto t = nn::ModelTrainer::from_config(tcfg, 2, 1, DeviceKind::cuda);
  auto tc = nn::ModelTrainer::from_config(tcfg, 2, 1, DeviceKind::cpu);
  const size_t tb = 1024;
  Pcg32 rng(3);
  std::vector<float> xs(tb * 2), ys(tb);
  Buffer<float> din(DeviceKind::cuda, tb * 2), dt(DeviceKind::cuda, tb);
  float first = 0, last = 0, last_cpu = 0;
  for (int step = 0; step < 100; ++step) {
    for (size_t i = 0; i < tb; ++i) {
      xs[2 * i] = rng.next_float(), xs[2 * i + 1] = rng.next_float();
      ys[i] = std::sin(3 * xs[2 * i]) * std::cos(2 * xs[2 * i + 1]);
    }
    din.copy_from_host(xs);
    dt.copy_from_host(ys);
    last = t->training_step(test::in_view(t->model(), din.data(), tb), test::out_view(t->model(), dt.data(), tb));
    last_cpu = tc->training_step(test::in_view(tc->model(), xs.data(), tb), test::out_view(tc->model(), ys.data(), tb));
    if (step == 0) first = last;
  }
  std::printf("[ measured ] CutlassMLP w192 loss %.4e -> %.4e in 100 steps (CPU %.4e)\n", first, last, last_cpu);
  EXPECT_LT(last, 0.6f * first);
  std::printf("[ measured ] relative gap to the CPU trainer %.2e\n", std::abs(last - last_cpu) / last_cpu);
  EXPECT_NEAR(last, last_cpu, 5e-3 * last_cpu);  // measured 3.9e-4
  EXPECT_EQ(t->skipped_steps(), 0u);
}

}  // namespace
}  // namespace tessera
