// Each op's contract (Op::check, src/ops/contracts/) refuses a bad call with an error that
// names the op, before any kernel runs: on a probe backend whose every kernel records that
// it ran, and on every backend of this build that has a device (the CPU always; CUDA on a
// GPU host; OpenCL where a platform is present). One bad call per op (a view of the wrong
// type or too short, a missing view, a wrong width), and a check that no op the backends
// register lacks one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "support/gpu.h"
#include "tessera/core/backend.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/isosurface.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/optimizers.h"
#include "tessera/ops/train_state.h"

namespace tessera::test {
namespace {

using namespace ops;
using V = TensorView;

// Zeroed device memory of one backend, freed with the test.
class Memory {
 public:
  explicit Memory(Backend& b) : b_(b) {}
  ~Memory() {
    for (void* p : blocks_) b_.deallocate(p);
  }
  V vec(DType t, size_t n) { return V::vector(block(n * dtype_size(t)), t, n); }
  V mat(DType t, size_t rows, size_t cols) { return V::matrix(block(rows * cols * dtype_size(t)), t, rows, cols, cols); }
  V f32(size_t n) { return vec(DType::f32, n); }
  V state() { return vec(DType::u8, sizeof(TrainState)); }

 private:
  void* block(size_t bytes) {
    bytes = std::max<size_t>(bytes, 16);
    void* p = b_.allocate(bytes);
    blocks_.push_back(p);
    b_.fill(p, 0, bytes, b_.default_stream());
    return p;
  }
  Backend& b_;
  std::vector<void*> blocks_;
};

struct BadCall {
  std::string op;
  std::function<void(Stream&, Memory&)> call;
};

template <class Op>
BadCall bad(std::function<void(Stream&, Memory&)> call) {
  return {Op::name, std::move(call)};
}

const MlpShape kShape{16, 64, 2, 4};
GridLayout grid_layout() { return make_grid_layout(3, 2, 2, 14, 16, 1.5f, true, GridInterpolation::Linear); }

// One call per op that breaks its contract in one place (said beside it).
std::vector<BadCall> bad_calls() {
  std::vector<BadCall> calls;
  const auto add = [&](BadCall c) { calls.push_back(std::move(c)); };
  ConvDesc conv;
  conv.N = 1, conv.C = 4, conv.H = 8, conv.W = 8, conv.K = 4;
  add(bad<Conv2dForward>([=](Stream& s, Memory& m) {  // y too short
    call<Conv2dForward>(s, conv, Activation::None, m.f32(conv.input_elements()), m.f32(conv.filter_elements()), V(),
                        m.f32(conv.output_elements() - 1));
  }));
  add(bad<Conv2dBackwardData>([=](Stream& s, Memory& m) {  // dz fp16 for an fp32 descriptor
    call<Conv2dBackwardData>(s, conv, Activation::None, m.vec(DType::f16, conv.output_elements()),
                             m.f32(conv.filter_elements()), V(), m.f32(conv.input_elements()));
  }));
  add(bad<Conv2dBackwardWeight>([=](Stream& s, Memory& m) {  // no dw
    call<Conv2dBackwardWeight>(s, conv, m.f32(conv.input_elements()), m.f32(conv.output_elements()), V(), V());
  }));
  add(bad<AdamStep>([](Stream& s, Memory& m) {  // v too short
    call<AdamStep>(s, AdamHyper{}, size_t(8), m.f32(8), m.f32(8), V(), m.f32(8), m.f32(7), ParamsAverage{}, m.state());
  }));
  add(bad<SgdStep>([](Stream& s, Memory& m) {  // no state
    call<SgdStep>(s, 0.1f, 0.0f, m.f32(8), m.f32(8), V(), V());
  }));
  add(bad<ConvertToHalf>([](Stream& s, Memory& m) {  // dst fp32
    call<ConvertToHalf>(s, m.f32(8), m.f32(8));
  }));
  ElementwiseEncoding freq{ElementwiseKind::Frequency, 3, 2};
  add(bad<ElementwiseEncode>([=](Stream& s, Memory& m) {  // output one column short
    call<ElementwiseEncode>(s, freq, m.mat(DType::f32, 4, 3), m.mat(DType::f32, 4, freq.output_width() - 1));
  }));
  add(bad<ElementwiseEncodeBackward>([=](Stream& s, Memory& m) {  // dL_din rows differ
    call<ElementwiseEncodeBackward>(s, freq, m.mat(DType::f32, 4, 3), m.mat(DType::f32, 4, freq.output_width()),
                                    m.mat(DType::f32, 5, 3));
  }));
  add(bad<ElementwiseEncodeBackwardBackward>([=](Stream& s, Memory& m) {  // dL_ddLdin fp16
    call<ElementwiseEncodeBackwardBackward>(s, freq, m.mat(DType::f32, 4, 3),
                                            m.mat(DType::f32, 4, freq.output_width()), m.mat(DType::f16, 4, 3), V(),
                                            V());
  }));
  add(bad<GridEncode>([](Stream& s, Memory& m) {  // the table one entry short
    const GridLayout g = grid_layout();
    call<GridEncode>(s, g, m.f32(g.n_params() - 1), m.vec(DType::f16, g.n_params()), m.mat(DType::f32, 4, 3),
                     m.mat(DType::f32, 4, g.output_width()));
  }));
  add(bad<GridEncodeHalf>([](Stream& s, Memory& m) {  // fp32 output
    const GridLayout g = grid_layout();
    call<GridEncodeHalf>(s, g, m.f32(g.n_params()), m.vec(DType::f16, g.n_params()), m.mat(DType::f32, 4, 3),
                         m.mat(DType::f32, 4, g.output_width()));
  }));
  add(bad<GridEncodeBackward>([](Stream& s, Memory& m) {  // dL_dparams too short
    const GridLayout g = grid_layout();
    call<GridEncodeBackward>(s, g, m.f32(g.n_params()), m.vec(DType::f16, g.n_params()), m.mat(DType::f32, 4, 3),
                             m.mat(DType::f32, 4, g.output_width()), m.f32(3), V());
  }));
  add(bad<GridEncodeBackwardBackward>([](Stream& s, Memory& m) {  // dL_dout_first without dL_dparams
    const GridLayout g = grid_layout();
    call<GridEncodeBackwardBackward>(s, g, m.f32(g.n_params()), m.vec(DType::f16, g.n_params()),
                                     m.mat(DType::f32, 4, 3), m.mat(DType::f32, 4, g.output_width()),
                                     m.mat(DType::f32, 4, 3), V(), V(), V(), m.mat(DType::f32, 4, g.output_width()));
  }));
  add(bad<SampleImage>([](Stream& s, Memory& m) {  // the image smaller than 4x4x3
    call<SampleImage>(s, m.f32(47), 4u, 4u, uint64_t(1), m.mat(DType::f32, 8, 2), m.mat(DType::f32, 8, 3));
  }));
  add(bad<Gemv>([](Stream& s, Memory& m) {  // x shorter than A's columns
    call<Gemv>(s, GemvOp::N, 1.0f, m.mat(DType::f32, 8, 6), m.f32(5), 0.0f, m.f32(8), Activation::None);
  }));
  add(bad<Ger>([](Stream& s, Memory& m) {  // y shorter than A's columns
    call<Ger>(s, 1.0f, m.f32(8), m.f32(5), m.mat(DType::f32, 8, 6));
  }));
  GemmDesc gemm;
  gemm.M = 8, gemm.N = 8, gemm.K = 8, gemm.a.ld = gemm.b.ld = gemm.c.ld = 8;
  add(bad<Gemm>([=](Stream& s, Memory& m) {  // C too short
    call<Gemm>(s, gemm, m.f32(64), m.f32(64), m.f32(63));
  }));
  add(bad<GemmActivation>([=](Stream& s, Memory& m) {  // no Y for the derivative epilogue
    call<GemmActivation>(s, gemm, GemmEpilogue{GemmEpilogueKind::activation_derivative, Activation::ReLU}, m.f32(64),
                         m.f32(64), m.f32(64), V());
  }));
  add(bad<ActivationBackward>([](Stream& s, Memory& m) {  // g too short
    call<ActivationBackward>(s, Activation::ReLU, m.f32(8), m.f32(7), m.f32(8));
  }));
  add(bad<MatrixAxpby>([](Stream& s, Memory& m) {  // src of another shape
    call<MatrixAxpby>(s, 1.0f, m.mat(DType::f32, 4, 5), 0.0f, m.mat(DType::f32, 4, 4));
  }));
  add(bad<FusedMlpInference>([](Stream& s, Memory& m) {  // the weights one short
    call<FusedMlpInference>(s, kShape, MlpActivations{}, m.vec(DType::f16, kShape.n_params() - 1),
                            m.mat(DType::f32, 32, 16), m.mat(DType::f32, 32, 4), FusedMlpOptions{});
  }));
  add(bad<FusedMlpInferenceGridInput>([](Stream& s, Memory& m) {  // no grid layout
    call<FusedMlpInferenceGridInput>(s, kShape, MlpActivations{}, m.vec(DType::f16, kShape.n_params()),
                                     FusedGridInputViews{}, m.mat(DType::f32, 32, 3), m.mat(DType::f32, 32, 4),
                                     FusedMlpOptions{});
  }));
  add(bad<FusedMlpTrain>([](Stream& s, Memory& m) {  // both a target and dL/doutput
    FusedMlpTrainArgs a;
    a.weights = m.vec(DType::f16, kShape.n_params());
    a.input = m.mat(DType::f32, 32, 16);
    a.target = m.mat(DType::f32, 32, 4);
    a.dL_doutput = m.mat(DType::f32, 32, 4);
    a.dL_dparams = m.f32(kShape.n_params());
    a.state = m.state();
    call<FusedMlpTrain>(s, kShape, MlpActivations{}, a, s.workspace());
  }));
  add(bad<MlpBackwardBackward>([](Stream& s, Memory& m) {  // dL_ddLdin one column short
    call<MlpBackwardBackward>(s, kShape, MlpActivations{}, m.f32(kShape.n_params()), m.mat(DType::f32, 8, 16),
                              m.mat(DType::f32, 8, 4), m.mat(DType::f32, 8, 15), V(), V(), V(),
                              GradientMode::overwrite);
  }));
  add(bad<ActivationForwardHalf>([](Stream& s, Memory& m) {  // y16 fp32
    call<ActivationForwardHalf>(s, Activation::ReLU, m.f32(8), m.f32(8), V());
  }));
  add(bad<ActivationBackwardHalf>([](Stream& s, Memory& m) {  // dz16 short
    call<ActivationBackwardHalf>(s, Activation::ReLU, m.f32(8), m.f32(8), m.vec(DType::f16, 7), m.state(), false);
  }));
  add(bad<Unscale>([](Stream& s, Memory& m) {  // dst short
    call<Unscale>(s, m.f32(8), m.f32(7), false, m.state());
  }));
  add(bad<EikonalGradient>([](Stream& s, Memory& m) {  // dE_dg of another shape
    call<EikonalGradient>(s, 0.1f, m.mat(DType::f32, 8, 3), m.mat(DType::f32, 8, 2));
  }));
  add(bad<LossForwardBackward>([](Stream& s, Memory& m) {  // target short
    call<LossForwardBackward>(s, LossParams{}, m.f32(8), m.f32(7), 1.0f, m.f32(8), m.f32(256), m.state());
  }));
  add(bad<SettleStep>([](Stream& s, Memory& m) {  // no state
    call<SettleStep>(s, m.f32(8), V());
  }));
  add(bad<GradientBf16Exchange>([](Stream& s, Memory& m) {  // packed fp16, not bf16
    call<GradientBf16Exchange>(s, m.f32(8), m.vec(DType::f16, 8), true, 1u);
  }));
  const auto rays = [](Memory& m, uint32_t n) { return m.vec(DType::u8, n * sizeof(NerfRay)); };
  add(bad<NerfMarchRays>([=](Stream& s, Memory& m) {  // samples 5 wide
    NerfRaySelection sel;
    sel.n_rays = 4;
    call<NerfMarchRays>(s, NerfScene{}, sel, rays(m, 4), m.mat(DType::f32, 64, 5), m.f32(64),
                        m.vec(DType::u32, 2));
  }));
  add(bad<NerfCompositeTrain>([=](Stream& s, Memory& m) {  // dt short
    call<NerfCompositeTrain>(s, NerfScene{}, NerfImages{}, rays(m, 4), 4u, m.mat(DType::f32, 16, 4), m.f32(15), V(),
                             0.0f, LossParams{}, 1u, m.mat(DType::f32, 16, 4), m.f32(4096), m.state());
  }));
  add(bad<NerfCompactSamples>([=](Stream& s, Memory& m) {  // density_every 3
    call<NerfCompactSamples>(s, rays(m, 4), 4u, m.mat(DType::f32, 16, 1), 3u, m.mat(DType::f32, 16, 6), m.f32(16),
                             m.mat(DType::f32, 16, 6), m.f32(16), m.vec(DType::u32, 2), m.vec(DType::u32, 4096));
  }));
  add(bad<NerfPadBatch>([](Stream& s, Memory& m) {  // no count
    call<NerfPadBatch>(s, V(), m.mat(DType::f32, 16, 6));
  }));
  add(bad<NerfCompositeRender>([=](Stream& s, Memory& m) {  // rgba short
    call<NerfCompositeRender>(s, rays(m, 4), 4u, m.mat(DType::f32, 16, 4), m.f32(16), nerf::Vec3{}, m.f32(15));
  }));
  add(bad<NerfAppendEmbeddings>([=](Stream& s, Memory& m) {  // embeddings 3 wide for inputs 6 + 2
    call<NerfAppendEmbeddings>(s, rays(m, 4), 4u, m.mat(DType::f32, 16, 6), m.mat(DType::f32, 2, 3),
                               m.mat(DType::f32, 16, 8));
  }));
  add(bad<NerfFrameGradients>([=](Stream& s, Memory& m) {  // dL_dsamples of another shape
    call<NerfFrameGradients>(s, NerfScene{}, rays(m, 4), 4u, m.mat(DType::f32, 16, 6), m.mat(DType::f32, 15, 6), V(),
                             V(), V());
  }));
  add(bad<NerfGridSamples>([](Stream& s, Memory& m) {  // positions short
    call<NerfGridSamples>(s, NerfScene{}, 8u, 8u, 1u, m.vec(DType::u32, 16), m.f32(16 * 6 - 1));
  }));
  add(bad<NerfGridUpdate>([](Stream& s, Memory& m) {  // the bitfield short
    call<NerfGridUpdate>(s, 1u, m.vec(DType::u32, 8), m.mat(DType::f32, 8, 1), 0.95f, m.f32(nerf::kGridCells),
                         m.f32(nerf::kGridCells), m.vec(DType::u8, nerf::kGridCells / 8 - 1));
  }));
  add(bad<NerfMarkUntrained>([](Stream& s, Memory& m) {  // density short
    call<NerfMarkUntrained>(s, NerfScene{}, m.f32(nerf::kGridCells - 1));
  }));
  add(bad<IsosurfaceCount>([](Stream& s, Memory& m) {  // res 1
    call<IsosurfaceCount>(s, m.f32(8), 1u, 0.0f, m.vec(DType::u8, 8), m.vec(DType::u32, 9), m.vec(DType::u32, 2));
  }));
  add(bad<IsosurfaceEmit>([](Stream& s, Memory& m) {  // field short
    call<IsosurfaceEmit>(s, m.f32(26), 3u, 0.0f, nerf::Aabb{}, m.vec(DType::u8, 27), m.vec(DType::u32, 28),
                         m.vec(DType::u32, 9), m.f32(3), m.f32(3), m.vec(DType::u32, 3));
  }));
  return calls;
}

// Ops whose calls take no views (queries of the backend): nothing for a contract to refuse.
const std::set<std::string> kQueries = {LossPartialsNeeded::name,       NerfCompositeTrainPartials::name,
                                        NerfCompactScratch::name,       FusedMlpAcceptsHalfInput::name,
                                        FusedMlpAcceptsGridInput::name, FusedMlpLaunchInfo::name};

// A backend on host memory whose every kernel only records that it ran.
class ProbeBackend : public Backend {
 public:
  ProbeBackend() : Backend(Device(DeviceKind::cpu, 0)) {
    set_default_stream(std::make_unique<Stream>(*this, nullptr));
    register_all();
  }
  static bool& ran() {
    static bool flag = false;
    return flag;
  }
  void* allocate(size_t bytes) override { return std::calloc(1, bytes); }
  void deallocate(void* p) noexcept override { std::free(p); }
  void copy_to_device(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n, Stream&) override { std::memcpy(dst, src, n); }
  void fill(void* dst, int v, size_t n, Stream&) override { std::memset(dst, v, n); }
  void synchronize(Stream&) override {}
  void synchronize_all() override {}
  std::unique_ptr<Event> create_event() override { return nullptr; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<Stream>(*this, nullptr); }

 private:
  template <class Fn>
  struct Recorder;
  template <class R, class... A>
  struct Recorder<R(A...)> {
    static R run(A...) {
      ran() = true;
      return R();
    }
  };
  template <class... Ops>
  void add() {
    (add_op<Ops>(&Recorder<typename Ops::Fn>::run), ...);
  }
  void register_all() {
    add<Conv2dForward, Conv2dBackwardData, Conv2dBackwardWeight, AdamStep, SgdStep, ConvertToHalf, ElementwiseEncode,
        ElementwiseEncodeBackward, ElementwiseEncodeBackwardBackward, GridEncode, GridEncodeHalf, GridEncodeBackward,
        GridEncodeBackwardBackward, SampleImage, Gemv, Ger, Gemm, GemmActivation, ActivationBackward, MatrixAxpby,
        FusedMlpInference, FusedMlpInferenceGridInput, FusedMlpTrain, FusedMlpAcceptsHalfInput,
        FusedMlpAcceptsGridInput, FusedMlpLaunchInfo, MlpBackwardBackward, ActivationForwardHalf,
        ActivationBackwardHalf, Unscale, EikonalGradient, LossForwardBackward, LossPartialsNeeded, SettleStep,
        GradientBf16Exchange, NerfMarchRays, NerfCompositeTrain, NerfCompositeTrainPartials, NerfCompactSamples,
        NerfCompactScratch, NerfPadBatch, NerfCompositeRender, NerfAppendEmbeddings, NerfFrameGradients,
        NerfGridSamples, NerfGridUpdate, NerfMarkUntrained, IsosurfaceCount, IsosurfaceEmit>();
  }
};

// The error a bad call gives, "" if it gave none.
std::string refusal(const BadCall& c, Stream& s, Memory& m) {
  try {
    c.call(s, m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OpContracts, EveryOpTheBackendsRegisterHasABadCall) {
  std::set<std::string> covered = kQueries;
  for (const BadCall& c : bad_calls()) covered.insert(c.op);
  ProbeBackend probe;
  std::vector<const Backend*> backends = {&probe};
  for (const Device& d : available_devices()) backends.push_back(&backend_for(d));
  for (const Backend* b : backends)
    for (const std::string& op : b->op_names())
      EXPECT_TRUE(covered.count(op)) << "op '" << op << "' (on " << b->name() << ") has no bad call here";
}

TEST(OpContracts, RefusedBeforeAnyKernelRuns) {
  ProbeBackend probe;
  Memory memory(probe);
  for (const BadCall& c : bad_calls()) {
    ProbeBackend::ran() = false;
    const std::string why = refusal(c, probe.default_stream(), memory);
    EXPECT_EQ(why.rfind(c.op + ": ", 0), 0u) << c.op << " gave \"" << why << "\"";
    EXPECT_FALSE(ProbeBackend::ran()) << c.op << ": a kernel ran";
  }
}

TEST(OpContracts, RefusedWithTheOpsMessageOnEveryBackend) {
  for (const Device& d : available_devices()) {
    Backend& b = backend_for(d);
    Memory memory(b);
    size_t tried = 0;
    for (const BadCall& c : bad_calls()) {
      bool supported = false;
      for (const std::string& op : b.op_names()) supported = supported || op == c.op;
      if (!supported) continue;
      ++tried;
      const std::string why = refusal(c, b.default_stream(), memory);
      EXPECT_EQ(why.rfind(c.op + ": ", 0), 0u) << c.op << " on " << b.name() << " gave \"" << why << "\"";
    }
    b.synchronize_all();
    std::printf("[ refused  ] %s: %zu bad calls\n", b.name().c_str(), tried);
  }
}

}  // namespace
}  // namespace tessera::test
