// Composite modules: Sequential (children chained) and Parallel (branches on column
// ranges of the input, outputs concatenated). Parameters of the children sit in
// consecutive slices of the composite's matrix and table regions.
#include <algorithm>

#include "module_internal.h"
#include "tessera/core/error.h"

namespace tessera::nn {
namespace {

struct CompositeContext final : ModuleContext {
  std::vector<std::unique_ptr<ModuleContext>> children;
  std::vector<bool> half_input;  // Sequential: child i was fed fp16 by child i - 1
  uint64_t generation = 0;
};

CompositeContext& composite_context(ModuleContext& base, const char* what) {
  auto* ctx = dynamic_cast<CompositeContext*>(&base);
  TESSERA_CHECK(ctx, "{} backward: the context comes from another module", what);
  return *ctx;
}

// Hands each child its slice of both parameter regions; seeds differ per child.
class CompositeBase : public Module {
 public:
  Device device() const override { return device_; }
  size_t n_params() const override {
    size_t n = 0;
    for (const Module* c : children_) n += c->n_params();
    return n;
  }
  size_t n_matrix_params() const override {
    size_t n = 0;
    for (const Module* c : children_) n += c->n_matrix_params();
    return n;
  }
  void bind_params(const ParamBinding& matrices, const ParamBinding& tables) override {
    size_t m = 0, t = 0;
    for (Module* c : children_) {
      c->bind_params(matrices.slice(m, c->n_matrix_params()), tables.slice(t, c->n_table_params()));
      m += c->n_matrix_params();
      t += c->n_table_params();
    }
  }
  void initialize(uint64_t seed) override {
    for (size_t i = 0; i < children_.size(); ++i) children_[i]->initialize(seed + 0x9e3779b97f4a7c15ULL * (i + 1));
  }
  void params_changed() override {
    for (Module* c : children_) c->params_changed();
  }
  void bind_train_state(const TensorView& state) override {
    for (Module* c : children_) c->bind_train_state(state);
  }
  void set_stream(Stream& stream) override {
    Module::set_stream(stream);
    for (Module* c : children_) c->set_stream(stream);
  }
  Module* child(size_t i) override { return i < children_.size() ? children_[i] : nullptr; }

 protected:
  void set_children(std::vector<Module*> children, const char* what) {
    TESSERA_CHECK(!children.empty(), "{}: needs at least one module", what);
    for (Module* c : children) {
      TESSERA_CHECK(c, "{}: a module is missing", what);
      TESSERA_CHECK(c->device() == children.front()->device(), "{}: modules on different devices ({} and {})", what,
                    to_string(c->device()), to_string(children.front()->device()));
    }
    children_ = std::move(children);
    device_ = children_.front()->device();
  }
  std::vector<Module*> children_;
  Device device_ = DeviceKind::cpu;
};

class Sequential final : public CompositeBase {
 public:
  explicit Sequential(std::vector<std::unique_ptr<Module>> children) : owned_(std::move(children)) {
    std::vector<Module*> raw;
    for (auto& c : owned_) raw.push_back(c.get());
    set_children(raw, "Sequential");
    for (size_t i = 0; i + 1 < owned_.size(); ++i)
      TESSERA_CHECK(owned_[i]->output_width() == owned_[i + 1]->input_width(),
                    "Sequential: module {} puts out {} columns but module {} takes {}", i, owned_[i]->output_width(),
                    i + 1, owned_[i + 1]->input_width());
    for (size_t i = 0; i + 1 < owned_.size(); ++i) {
      act_.emplace_back(device_, 0);
      grad_.emplace_back(device_, 0);
      half_.emplace_back(device_, 0);
      second_.emplace_back(device_);
    }
    second_out_ = Buffer<float>(device_, 0);
    second_tmp_ = Buffer<float>(device_, 0);
    if (owned_.size() == 2) encoded_mlp_ = detail::EncodedMlp::recognise(*owned_[0], *owned_[1]);
  }
  uint32_t input_width() const override { return owned_.front()->input_width(); }
  uint32_t output_width() const override { return owned_.back()->output_width(); }
  Json config() const override {
    Json modules = Json::array();
    for (auto& c : owned_) modules.push_back(c->config());
    return Json{{"otype", "Sequential"}, {"modules", modules}};
  }

  void inference(ConstView in, View out) override {
    check_shapes("Sequential inference", in, out);
    if (encoded_mlp_ && encoded_mlp_->inference(in, out)) return;
    run_forward(in, out, nullptr);
  }
  bool fused_training_step(ConstView in, ConstView target, const LossParams& loss, bool settle) override {
    if (owned_.size() == 1) return owned_[0]->fused_training_step(in, target, loss, settle);
    return encoded_mlp_ && encoded_mlp_->fused_training_step(in, target, loss, settle);
  }
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override {
    check_shapes("Sequential forward", in, out);
    auto ctx = std::make_unique<CompositeContext>();
    run_forward(in, out, ctx.get());
    ctx->generation = ++generation_;
    return ctx;
  }
  void backward(ModuleContext& base, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override {
    CompositeContext& ctx = composite_context(base, "Sequential");
    TESSERA_CHECK(ctx.generation == generation_,
                  "Sequential backward: another forward ran since this context's forward (one forward in flight per "
                  "module)");
    check_shapes("Sequential backward", in, dL_dout);
    const size_t batch = in.rows();
    // Gradients flow into module i's input only when someone upstream needs them.
    std::vector<bool> need_input_grad(owned_.size(), !dL_din.empty());
    for (size_t i = 1; i < owned_.size(); ++i)
      need_input_grad[i] = need_input_grad[i - 1] || owned_[i - 1]->n_params() > 0;
    ConstView g = dL_dout;
    for (size_t i = owned_.size(); i-- > 0;) {
      // A child fed fp16 keeps its input itself: it gets a view without data.
      const uint32_t width = owned_[i]->input_width();
      const ConstView x = i == 0               ? in
                          : ctx.half_input[i] ? View::matrix(nullptr, DType::f32, batch, width, width)
                                              : act_[i - 1].matrix(batch, width);
      View dx;
      if (need_input_grad[i]) dx = i == 0 ? dL_din : detail::scratch_view(grad_[i - 1], batch, owned_[i]->input_width());
      owned_[i]->backward(*ctx.children[i], x, g, dx, mode);
      if (!need_input_grad[i]) break;  // nothing before module i has parameters or wants gradients
      g = dx;
    }
  }

  // Second derivatives by the chain rule over the children m_0..m_{k-1} (u_0 = in,
  // u_{i+1} = m_i(u_i); the first backward gives g_k = dL_dout, g_i = J_i^T g_{i+1}):
  //  1. forward with contexts (fp32 hand-over), 2. the first backward for g_1..g_{k-1},
  //  3. each child's second backward in order, m_i(u_i, g_{i+1}, ddx_i) giving ddx_{i+1}
  //     (the last: dL_ddLdout) and a_i, the adjoint of u_i through J_i's dependence on u_i,
  //  4. the a_i carried back through the forward chain by plain backward passes (each child
  //     forwarded again just before, as step 3 may have run its parts' forwards).
  // Step 2 writes stale parameter gradients into m_1..m_{k-1}; step 3 overwrites them,
  // hence mode overwrite only.
  void backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout, View dL_din,
                               GradientMode mode) override {
    const size_t k = owned_.size();
    if (k == 1) return owned_[0]->backward_backward_input(in, dL_dout, dL_ddLdin, dL_ddLdout, dL_din, mode);
    check_shapes("Sequential second backward", in, dL_dout);
    check_shapes("Sequential second backward (dL_ddLdin, dL_dout)", dL_ddLdin, dL_dout);
    TESSERA_CHECK(mode == GradientMode::overwrite,
                  "Sequential: second derivatives overwrite the parameter gradients (mode accumulate is not supported)");
    const size_t batch = in.rows();
    auto u = [&](size_t i) -> View {
      return i == 0 ? in : detail::scratch_view(act_[i - 1], batch, owned_[i]->input_width());
    };
    auto g = [&](size_t i) -> View {  // dL/du_i of the first backward; g_k = dL_dout
      return i == k ? dL_dout : detail::scratch_view(grad_[i - 1], batch, owned_[i]->input_width());
    };
    auto ddx = [&](size_t i) -> View {  // the second loss's gradient w.r.t. g_i
      return i == 0 ? dL_ddLdin : detail::scratch_view(second_[i - 1].ddx, batch, owned_[i]->input_width());
    };
    auto adjoint = [&](size_t i) -> View {  // dL/du_i of the second backward
      return i == 0 ? dL_din : detail::scratch_view(second_[i - 1].adjoint, batch, owned_[i]->input_width());
    };
    std::vector<std::unique_ptr<ModuleContext>> ctx(k);
    for (size_t i = 0; i < k; ++i)
      ctx[i] = owned_[i]->forward(u(i), i + 1 < k ? u(i + 1) : detail::scratch_view(second_out_, batch, output_width()));
    for (size_t i = k - 1; i >= 1; --i) owned_[i]->backward(*ctx[i], u(i), g(i + 1), g(i), GradientMode::overwrite);
    for (size_t i = 0; i < k; ++i)
      owned_[i]->backward_backward_input(u(i), g(i + 1), ddx(i), i + 1 < k ? ddx(i + 1) : dL_ddLdout, adjoint(i),
                                         GradientMode::overwrite);
    for (size_t i = k - 1; i >= 1; --i) {
      Module& m = *owned_[i - 1];
      const std::unique_ptr<ModuleContext> again = m.forward(u(i - 1), u(i));
      const bool to_input = i > 1 || !dL_din.empty();
      const View dx = to_input ? detail::scratch_view(second_tmp_, batch, m.input_width()) : View();
      m.backward(*again, u(i - 1), adjoint(i), dx, GradientMode::accumulate);
      if (to_input) detail::copy_view(stream(), dx, adjoint(i - 1), 1.0f);
    }
  }

  // One forward of each child (fp32 hand-over: every intermediate is read again), the first
  // backward for g (a grid as the first child skips its scatter), the term, each child's
  // second backward, then one backward whose upstream at each boundary is the output loss's
  // gradient plus the term's adjoint there (backward is linear in it): the default's second
  // forward, and one of the two backward passes through the children, are saved.
  void backward_with_input_gradient_term(const InputGradientStep& s) override {
    const size_t k = owned_.size();
    if (k == 1) return owned_[0]->backward_with_input_gradient_term(s);
    check_shapes("Sequential step with an input-gradient term", s.in, s.seed);
    const size_t batch = s.in.rows();
    auto u = [&](size_t i) -> View {
      return i == 0 ? s.in : i == k ? s.y : detail::scratch_view(act_[i - 1], batch, owned_[i]->input_width());
    };
    auto g = [&](size_t i) -> View {
      return i == 0 ? s.g : i == k ? s.seed : detail::scratch_view(grad_[i - 1], batch, owned_[i]->input_width());
    };
    auto ddx = [&](size_t i) -> View {
      return i == 0 ? s.dT_dg : detail::scratch_view(second_[i - 1].ddx, batch, owned_[i]->input_width());
    };
    auto adjoint = [&](size_t i) -> View {
      return detail::scratch_view(second_[i - 1].adjoint, batch, owned_[i]->input_width());
    };
    std::vector<std::unique_ptr<ModuleContext>> ctx(k);
    for (size_t i = 0; i < k; ++i) ctx[i] = owned_[i]->forward(u(i), u(i + 1));
    for (size_t i = k; i-- > 0;)  // parameter gradients: overwritten by the second backward next
      if (i > 0 || !owned_[0]->input_gradient_only(*ctx[0], u(0), g(1), g(0)))
        owned_[i]->backward(*ctx[i], u(i), g(i + 1), g(i), GradientMode::overwrite);
    s.term(s.g, s.dT_dg);
    // The first child's parameter gradients may wait for the last backward and share its pass.
    const bool first_split = owned_[0]->second_backward_outputs(u(0), g(1), ddx(0), ddx(1));
    for (size_t i = first_split ? 1 : 0; i < k; ++i)
      owned_[i]->backward_backward_input(u(i), g(i + 1), ddx(i), i + 1 < k ? ddx(i + 1) : View(),
                                         i > 0 ? adjoint(i) : View(), GradientMode::overwrite);
    s.loss(s.y, s.dL_dy);
    ConstView up = s.dL_dy;
    for (size_t i = k; i-- > 0;) {
      Module& m = *owned_[i];
      if (i == 0 && first_split) {  // its gradients were not written yet: overwrite
        m.second_backward_params(u(0), g(1), ddx(0), up, GradientMode::overwrite);
        break;
      }
      // A composite child's second backward ran its children's forwards: its context is stale.
      if (m.child(0)) ctx[i] = m.forward(u(i), u(i + 1));
      const View dx = i > 0 ? detail::scratch_view(second_tmp_, batch, m.input_width()) : View();
      m.backward(*ctx[i], u(i), up, dx, GradientMode::accumulate);
      if (i == 0) break;
      detail::copy_view(stream(), dx, adjoint(i), 1.0f);  // the loss's gradient plus the term's adjoint at u_i
      up = adjoint(i);
    }
  }

 private:
  void run_forward(ConstView in, View out, CompositeContext* ctx) {
    const size_t batch = in.rows(), k = owned_.size();
    if (ctx) ctx->half_input.assign(k, false);
    ConstView x = in;
    for (size_t i = 0; i < k; ++i) {
      Module& m = *owned_[i];
      View y = i + 1 == k ? out : detail::scratch_view(act_[i], batch, m.output_width());
      const bool hand_over_half = i + 1 < k && batch > 0 && m.can_output_half() &&
                                  owned_[i + 1]->accepts_half_input(batch, ctx != nullptr);
      if (!hand_over_half) {
        if (ctx) ctx->children.push_back(m.forward(x, y));
        else m.inference(x, y);
        x = y;
        continue;
      }
      // fp16 from module i straight into module i + 1 (act_[i] stays unused).
      half_[i].ensure(batch * m.output_width());
      const View half = half_[i].matrix(batch, m.output_width());
      Module& next = *owned_[i + 1];
      View next_y = i + 2 == k ? out : detail::scratch_view(act_[i + 1], batch, next.output_width());
      if (ctx) {
        ctx->children.push_back(m.forward(x, half));
        ctx->children.push_back(next.forward(half, next_y));
        ctx->half_input[i + 1] = true;
      } else {
        m.inference(x, half);
        next.inference(half, next_y);
      }
      x = next_y;
      ++i;
    }
  }

  std::vector<std::unique_ptr<Module>> owned_;
  std::vector<Buffer<float>> act_, grad_;  // [batch, width of module i's output], grow-only
  std::vector<Buffer<uint16_t>> half_;     // fp16 output of module i when handed over so
  std::unique_ptr<detail::EncodedMlp> encoded_mlp_;  // {encoding, MLP}: its fast paths
  struct SecondOrderScratch {  // per child i >= 1: the gradients w.r.t. g_i and u_i
    explicit SecondOrderScratch(Device device) : ddx(device, 0), adjoint(device, 0) {}
    Buffer<float> ddx, adjoint;
  };
  std::vector<SecondOrderScratch> second_;
  Buffer<float> second_out_, second_tmp_;
  uint64_t generation_ = 0;
};

class Parallel final : public CompositeBase {
 public:
  Parallel(uint32_t input_width, std::vector<Branch> branches) : input_width_(input_width), branches_(std::move(branches)) {
    std::vector<Module*> raw;
    uint32_t out = 0;
    for (size_t i = 0; i < branches_.size(); ++i) {
      const Branch& b = branches_[i];
      TESSERA_CHECK(b.module, "Parallel: branch {} has no module", i);
      TESSERA_CHECK(b.first_input + b.module->input_width() <= input_width,
                    "Parallel: branch {} reads columns [{}, {}) of an input of {}", i, b.first_input,
                    b.first_input + b.module->input_width(), input_width);
      raw.push_back(b.module.get());
      out_offset_.push_back(out);
      out += b.module->output_width();
      // A branch whose input columns overlap an earlier branch's adds its input gradient
      // through scratch; the others write theirs in place.
      bool overlaps = false;
      for (size_t j = 0; j < i; ++j) {
        const Branch& o = branches_[j];
        overlaps |= b.first_input < o.first_input + o.module->input_width() &&
                    o.first_input < b.first_input + b.module->input_width();
      }
      accumulates_.push_back(overlaps);
      scratch_.emplace_back(b.module->device(), 0);
    }
    output_width_ = out;
    set_children(raw, "Parallel");
    std::vector<bool> covered(input_width, false);
    for (const Branch& b : branches_)
      for (uint32_t c = 0; c < b.module->input_width(); ++c) covered[b.first_input + c] = true;
    for (uint32_t c = 0; c < input_width;) {  // column runs no branch reads: their gradient is 0
      if (covered[c]) {
        ++c;
        continue;
      }
      uint32_t e = c;
      while (e < input_width && !covered[e]) ++e;
      uncovered_.push_back({c, e - c});
      c = e;
    }
  }
  uint32_t input_width() const override { return input_width_; }
  uint32_t output_width() const override { return output_width_; }
  Json config() const override {
    Json branches = Json::array();
    for (const Branch& b : branches_)
      branches.push_back(Json{{"first_input", b.first_input}, {"n_input_dims", b.module->input_width()},
                              {"module", b.module->config()}});
    return Json{{"otype", "Parallel"}, {"n_input_dims", input_width_}, {"branches", branches}};
  }

  void inference(ConstView in, View out) override {
    check_shapes("Parallel inference", in, out);
    for (size_t i = 0; i < branches_.size(); ++i) branches_[i].module->inference(branch_input(in, i), branch_output(out, i));
  }
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override {
    check_shapes("Parallel forward", in, out);
    auto ctx = std::make_unique<CompositeContext>();
    for (size_t i = 0; i < branches_.size(); ++i)
      ctx->children.push_back(branches_[i].module->forward(branch_input(in, i), branch_output(out, i)));
    return ctx;
  }
  void backward(ModuleContext& base, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override {
    CompositeContext& ctx = composite_context(base, "Parallel");
    check_shapes("Parallel backward", in, dL_dout);
    if (!dL_din.empty())
      for (const auto& [first, count] : uncovered_) detail::zero_view(stream(), dL_din.columns(first, count));
    for (size_t i = 0; i < branches_.size(); ++i) {
      Module& m = *branches_[i].module;
      const ConstView g = dL_dout.columns(out_offset_[i], m.output_width());
      if (dL_din.empty()) {
        m.backward(*ctx.children[i], branch_input(in, i), g, View(), mode);
      } else if (!accumulates_[i]) {
        m.backward(*ctx.children[i], branch_input(in, i), g, branch_input(dL_din, i), mode);
      } else {
        View dx = detail::scratch_view(scratch_[i], in.rows(), m.input_width());
        m.backward(*ctx.children[i], branch_input(in, i), g, dx, mode);
        detail::copy_view(stream(), dx, branch_input(dL_din, i), 1.0f);
      }
    }
  }

  // Each branch on its columns: the second loss's gradient w.r.t. a branch's input gradient
  // is dL_ddLdin's columns of that branch; overlapping branches add their dL/d(in).
  void backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout, View dL_din,
                               GradientMode mode) override {
    check_shapes("Parallel second backward", in, dL_dout);
    check_shapes("Parallel second backward (dL_ddLdin, dL_dout)", dL_ddLdin, dL_dout);
    if (!dL_din.empty())
      for (const auto& [first, count] : uncovered_) detail::zero_view(stream(), dL_din.columns(first, count));
    for (size_t i = 0; i < branches_.size(); ++i) {
      Module& m = *branches_[i].module;
      const ConstView g = dL_dout.columns(out_offset_[i], m.output_width());
      const View ddy = dL_ddLdout.empty() ? View() : branch_output(dL_ddLdout, i);
      const ConstView ddx = branch_input(dL_ddLdin, i);
      if (dL_din.empty() || !accumulates_[i]) {
        m.backward_backward_input(branch_input(in, i), g, ddx, ddy, dL_din.empty() ? View() : branch_input(dL_din, i),
                                  mode);
      } else {
        View dx = detail::scratch_view(scratch_[i], in.rows(), m.input_width());
        m.backward_backward_input(branch_input(in, i), g, ddx, ddy, dx, mode);
        detail::copy_view(stream(), dx, branch_input(dL_din, i), 1.0f);
      }
    }
  }

 private:
  View branch_input(View in, size_t i) const {
    return in.columns(branches_[i].first_input, branches_[i].module->input_width());
  }
  View branch_output(View out, size_t i) const { return out.columns(out_offset_[i], branches_[i].module->output_width()); }

  uint32_t input_width_, output_width_ = 0;
  std::vector<Branch> branches_;
  std::vector<uint32_t> out_offset_;
  std::vector<bool> accumulates_;
  std::vector<std::pair<uint32_t, uint32_t>> uncovered_;  // (first column, count)
  std::vector<Buffer<float>> scratch_;
};

}  // namespace

std::unique_ptr<Module> make_sequential(std::vector<std::unique_ptr<Module>> children) {
  return std::make_unique<Sequential>(std::move(children));
}

std::unique_ptr<Module> make_parallel(uint32_t input_width, std::vector<Branch> branches) {
  return std::make_unique<Parallel>(input_width, std::move(branches));
}

}  // namespace tessera::nn
