// The C API's modules (one differentiable piece on a caller's parameters, as PyTorch's
// autograd drives it) and trainers (model + loss + optimizer, the fused step).
#include <cmath>
#include <memory>
#include <string>

#include "c_api_internal.h"
#include "tessera/core/config.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/nn/module.h"
#include "tessera/nn/training_snapshot.h"

static_assert(int(tessera::DType::f32) == TESSERA_F32 && int(tessera::DType::f16) == TESSERA_F16 &&
              int(tessera::DType::bf16) == TESSERA_BF16 && int(tessera::DType::u32) == TESSERA_U32 &&
              int(tessera::DType::u8) == TESSERA_U8);
static_assert(int(tessera::DeviceKind::cpu) == TESSERA_DEVICE_CPU &&
              int(tessera::DeviceKind::cuda) == TESSERA_DEVICE_CUDA &&
              int(tessera::DeviceKind::opencl) == TESSERA_DEVICE_OPENCL);

using namespace tessera;
using capi::guarded;

struct tessera_module {
  std::unique_ptr<nn::Module> module;
  Device device;
  capi::StreamCache streams;
  Buffer<uint16_t> params_half;  // the fp16 copy tensor cores read (backends that keep one)
  // What the module is bound to now; a call with other arrays rebinds.
  void* bound_params = nullptr;
  TensorView bound_grads;
  bool half_stale = true;
  // The latest forward's context and its number; backward of an older one recomputes.
  std::unique_ptr<nn::ModuleContext> context;
  uint64_t context_id = 0, next_id = 1;
  Buffer<float> recompute_out;

  explicit tessera_module(std::unique_ptr<nn::Module> m)
      : module(std::move(m)), device(module->device()), streams(device), recompute_out(device, 0) {
    if (backend_for(device).uses_half_params()) params_half = Buffer<uint16_t>(device, module->n_params());
  }

  Stream& use_stream(void* native) {
    Stream& s = streams.get(native);
    if (&s != &module->stream()) module->set_stream(s);
    return s;
  }

  // Binds the caller's parameters (and gradients, where given) and refreshes the fp16 copy
  // when they changed.
  void bind(const tessera_tensor* params_t, const tessera_tensor* grads_t) {
    const size_t n = module->n_params();
    if (n == 0) return;
    const TensorView params = capi::to_view_on(params_t, "params", device, TESSERA_F32);
    TESSERA_CHECK(params.numel() == n && params.contiguous(),
                  "params: expects a contiguous fp32 vector of the module's {} parameters, got {}", n, params.numel());
    TensorView grads = bound_grads;
    if (grads_t) {
      grads = capi::to_view_on(grads_t, "grads", device, TESSERA_F32);
      TESSERA_CHECK(grads.numel() == n && grads.contiguous(),
                    "grads: expects a contiguous fp32 vector of the module's {} parameters, got {}", n, grads.numel());
    }
    if (params.memory != bound_params || grads.memory != bound_grads.memory) {
      const nn::ParamBinding all{params, grads, params_half.size() ? params_half.view() : TensorView()};
      const size_t m = module->n_matrix_params();
      module->bind_params(all.slice(0, m), all.slice(m, n - m));
      half_stale |= params.memory != bound_params;
      bound_params = params.memory;
      bound_grads = grads;
    }
    if (half_stale) {
      module->params_changed();
      half_stale = false;
    }
  }

  nn::View matrix(const tessera_tensor* t, const char* what, uint32_t width) {
    const TensorView v = capi::to_view_on(t, what, device, TESSERA_F32);
    TESSERA_CHECK(v.rank == 2 && v.cols() == width, "{}: expects fp32 [batch, {}], got {}{}", what, width,
                  v.rank == 2 ? "columns " : "a vector", v.rank == 2 ? std::to_string(v.cols()) : "");
    return v;
  }
};

struct tessera_trainer {
  std::unique_ptr<nn::ModelTrainer> trainer;
  Device device;
  capi::StreamCache streams;
  capi::HostStage in, target, out;

  tessera_trainer(std::unique_ptr<nn::ModelTrainer> t, Device d)
      : trainer(std::move(t)), device(d), streams(d), in(d), target(d), out(d) {}
  Stream& use_stream(void* native) {
    Stream& s = streams.get(native);
    if (&s != &trainer->stream()) trainer->set_stream(s);
    return s;
  }
};

namespace {

Json parse_config(const char* text) {
  TESSERA_C_REQUIRE(text, "config_json");
  return parse_json(text, "config");
}

bool is_network_config(const Json& c) {
  if (!c.is_object() || !c.contains("otype") || !c.at("otype").is_string()) return false;
  const std::string otype = canonical_name(c.at("otype").get<std::string>(), {"FullyFusedMLP", "MLP", "CutlassMLP"});
  return otype == "FullyFusedMLP" || otype == "MLP" || otype == "CutlassMLP";
}

void check_width(const TensorView& v, uint32_t width, const char* what) {
  TESSERA_CHECK(v.rank == 2 && v.cols() == width, "{}: expects fp32 [batch, {}]", what, width);
}

// The trainer's whole parameter vector (a caller's copy of it).
void check_param_vector(const TensorView& p, size_t n) {
  TESSERA_CHECK(p.numel() == n && p.contiguous(), "params: expects fp32 [{}], got {} elements", n, p.numel());
}

void check_rows(const TensorView& a, const TensorView& b, const char* what_a, const char* what_b) {
  TESSERA_CHECK(a.rows() == b.rows(), "{} has {} rows, {} has {}", what_a, a.rows(), what_b, b.rows());
}

}  // namespace

extern "C" {

tessera_status tessera_module_create(const char* config_json, uint32_t n_input_dims, uint32_t n_output_dims,
                                     const char* device, tessera_module** module) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    TESSERA_C_REQUIRE(device, "device");
    *module = nullptr;
    const Json config = parse_config(config_json);
    const Device d = parse_device(device);
    TESSERA_CHECK(n_input_dims >= 1, "n_input_dims must be at least 1");
    std::unique_ptr<nn::Module> m;
    if (config.is_object() && config.contains("network") && !config.contains("otype")) {
      check_known_keys(config, "model config", {"encoding", "network"});
      m = nn::create_model(config.contains("encoding") ? config.at("encoding") : Json(), config.at("network"),
                           n_input_dims, n_output_dims, d);
    } else {
      Json c = config;
      // A network config takes its output width from the call, as tiny-cuda-nn's do.
      if (n_output_dims && is_network_config(c)) c = nn::tcnn_model_config(Json(), c, n_output_dims);
      m = nn::create_module(c, n_input_dims, d);
    }
    TESSERA_CHECK(n_output_dims == 0 || m->output_width() == n_output_dims,
                  "the module puts out {} columns, not the {} asked for", m->output_width(), n_output_dims);
    *module = new tessera_module(std::move(m));
  });
}

void tessera_module_destroy(tessera_module* module) {
  if (!module) return;
  guarded([&] { module->module->stream().synchronize(); });  // nothing of it still queued
  delete module;
}

tessera_status tessera_module_info_get(const tessera_module* module, tessera_module_info* info) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    TESSERA_C_REQUIRE(info, "info");
    const nn::Module& m = *module->module;
    *info = {m.input_width(), m.output_width(), m.n_params(), m.n_matrix_params(), int32_t(module->device.kind),
             module->device.index};
  });
}

tessera_status tessera_module_config(const tessera_module* module, const char** config_json) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    TESSERA_C_REQUIRE(config_json, "config_json");
    *config_json = capi::keep_string(module->module->config().dump());
  });
}

tessera_status tessera_module_initialize(tessera_module* module, const tessera_tensor* params, uint64_t seed,
                                         void* stream) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    module->use_stream(stream);
    module->bind(params, nullptr);
    module->module->initialize(seed);  // also refreshes the fp16 copy
  });
}

tessera_status tessera_module_params_changed(tessera_module* module) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    module->half_stale = true;
  });
}

tessera_status tessera_module_inference(tessera_module* module, const tessera_tensor* params, const tessera_tensor* in,
                                        const tessera_tensor* out, void* stream) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    nn::Module& m = *module->module;
    const nn::View x = module->matrix(in, "input", m.input_width()), y = module->matrix(out, "output", m.output_width());
    check_rows(x, y, "input", "output");
    module->use_stream(stream);
    module->bind(params, nullptr);
    m.inference(x, y);
  });
}

tessera_status tessera_module_forward(tessera_module* module, const tessera_tensor* params, const tessera_tensor* in,
                                      const tessera_tensor* out, void* stream, uint64_t* context) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    TESSERA_C_REQUIRE(context, "context");
    nn::Module& m = *module->module;
    const nn::View x = module->matrix(in, "input", m.input_width()), y = module->matrix(out, "output", m.output_width());
    check_rows(x, y, "input", "output");
    module->use_stream(stream);
    module->bind(params, nullptr);
    module->context.reset();
    module->context = m.forward(x, y);
    *context = module->context_id = module->next_id++;
  });
}

tessera_status tessera_module_backward(tessera_module* module, uint64_t context, const tessera_tensor* params,
                                       const tessera_tensor* grads, const tessera_tensor* in,
                                       const tessera_tensor* dL_dout, const tessera_tensor* dL_din, void* stream) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    nn::Module& m = *module->module;
    const nn::View x = module->matrix(in, "input", m.input_width());
    const nn::View dy = module->matrix(dL_dout, "dL_dout", m.output_width());
    check_rows(x, dy, "input", "dL_dout");
    nn::View dx;
    if (dL_din) {
      dx = module->matrix(dL_din, "dL_din", m.input_width());
      check_rows(x, dx, "input", "dL_din");
    }
    TESSERA_CHECK(m.n_params() == 0 || grads, "grads must not be null for a module with parameters");
    module->use_stream(stream);
    module->bind(params, grads);
    if (!module->context || context != module->context_id) {
      // Another forward ran since this context's: run this one's again.
      module->recompute_out.ensure(x.rows() * m.output_width());
      module->context.reset();
      module->context = m.forward(x, module->recompute_out.matrix(x.rows(), m.output_width()));
      module->context_id = context;
    }
    m.backward(*module->context, x, dy, dx, nn::GradientMode::overwrite);
  });
}

tessera_status tessera_module_backward_backward(tessera_module* module, const tessera_tensor* params,
                                                const tessera_tensor* grads, const tessera_tensor* in,
                                                const tessera_tensor* dL_dout, const tessera_tensor* dL_ddLdin,
                                                const tessera_tensor* dL_ddLdout, const tessera_tensor* dL_din,
                                                void* stream) {
  return guarded([&] {
    TESSERA_C_REQUIRE(module, "module");
    nn::Module& m = *module->module;
    const nn::View x = module->matrix(in, "input", m.input_width());
    const nn::View dy = module->matrix(dL_dout, "dL_dout", m.output_width());
    const nn::View ddx = module->matrix(dL_ddLdin, "dL_ddLdin", m.input_width());
    check_rows(x, dy, "input", "dL_dout");
    check_rows(x, ddx, "input", "dL_ddLdin");
    nn::View ddy, dx;
    if (dL_ddLdout) {
      ddy = module->matrix(dL_ddLdout, "dL_ddLdout", m.output_width());
      check_rows(x, ddy, "input", "dL_ddLdout");
    }
    if (dL_din) {
      dx = module->matrix(dL_din, "dL_din", m.input_width());
      check_rows(x, dx, "input", "dL_din");
    }
    TESSERA_CHECK(m.n_params() == 0 || grads, "grads must not be null for a module with parameters");
    module->use_stream(stream);
    module->bind(params, grads);
    m.backward_backward_input(x, dy, ddx, ddy, dx, nn::GradientMode::overwrite);
  });
}

tessera_status tessera_trainer_create(const char* config_json, uint32_t n_input_dims, uint32_t n_output_dims,
                                      const char* device, uint64_t seed, const tessera_tensor* params,
                                      tessera_trainer** trainer) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    TESSERA_C_REQUIRE(device, "device");
    *trainer = nullptr;
    const Device d = parse_device(device);
    TESSERA_CHECK(n_input_dims >= 1 && n_output_dims >= 1, "n_input_dims and n_output_dims must be at least 1");
    const TensorView external = params ? capi::to_view_on(params, "params", d, TESSERA_F32) : TensorView();
    auto t = nn::ModelTrainer::from_config(parse_config(config_json), n_input_dims, n_output_dims, d, seed, external);
    *trainer = new tessera_trainer(std::move(t), d);
  });
}

void tessera_trainer_destroy(tessera_trainer* trainer) {
  if (!trainer) return;
  guarded([&] { trainer->trainer->stream().synchronize(); });
  delete trainer;
}

tessera_status tessera_trainer_info_get(tessera_trainer* trainer, tessera_trainer_info* info) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    TESSERA_C_REQUIRE(info, "info");
    nn::ModelTrainer& t = *trainer->trainer;
    const ops::TrainState s = t.train_state();
    *info = {t.model().input_width(), t.model().output_width(), t.n_params(), t.steps(), s.skipped_steps,
             s.loss_scale, s.last_loss, int32_t(trainer->device.kind), trainer->device.index};
  });
}

tessera_status tessera_trainer_config(const tessera_trainer* trainer, const char** config_json) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    TESSERA_C_REQUIRE(config_json, "config_json");
    *config_json = capi::keep_string(trainer->trainer->config().dump());
  });
}

tessera_status tessera_trainer_step(tessera_trainer* trainer, const tessera_tensor* in, const tessera_tensor* target,
                                    void* stream, float* loss) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    nn::ModelTrainer& t = *trainer->trainer;
    Stream& s = trainer->use_stream(stream);
    const TensorView x = trainer->in.input(s, in, "input"), y = trainer->target.input(s, target, "target");
    check_width(x, t.model().input_width(), "input");
    check_width(y, t.model().output_width(), "target");
    check_rows(x, y, "input", "target");
    t.training_step_async(x, y);
    if (loss) *loss = t.last_loss();
  });
}

tessera_status tessera_trainer_inference(tessera_trainer* trainer, const tessera_tensor* in, const tessera_tensor* out,
                                         void* stream) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    nn::ModelTrainer& t = *trainer->trainer;
    Stream& s = trainer->use_stream(stream);
    const TensorView x = trainer->in.input(s, in, "input"), y = trainer->out.output(out, "output");
    check_width(x, t.model().input_width(), "input");
    check_width(y, t.model().output_width(), "output");
    check_rows(x, y, "input", "output");
    t.inference(x, y);
    trainer->out.copy_out(s);
  });
}

tessera_status tessera_trainer_get_params(tessera_trainer* trainer, const tessera_tensor* params) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    nn::ModelTrainer& t = *trainer->trainer;
    Stream& s = t.stream();
    const TensorView p = trainer->out.output(params, "params");
    check_param_vector(p, t.n_params());
    if (p.memory != t.params().memory) copy_view_to_view(s, p, t.params());
    trainer->out.copy_out(s);
  });
}

tessera_status tessera_trainer_set_params(tessera_trainer* trainer, const tessera_tensor* params) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    nn::ModelTrainer& t = *trainer->trainer;
    Stream& s = t.stream();
    const TensorView p = trainer->in.input(s, params, "params");
    check_param_vector(p, t.n_params());
    if (p.memory != t.params().memory) copy_view_to_view(s, t.params(), p);
    t.params_changed();
  });
}

tessera_status tessera_trainer_params_changed(tessera_trainer* trainer) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    trainer->trainer->params_changed();
  });
}

tessera_status tessera_trainer_set_loss_scale(tessera_trainer* trainer, float loss_scale) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    trainer->trainer->set_loss_scale(loss_scale);
  });
}

tessera_status tessera_trainer_set_progress(tessera_trainer* trainer, double fraction) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    TESSERA_CHECK(std::isfinite(fraction) && fraction >= 0, "training progress {} is not a fraction in [0, 1]",
                  fraction);
    trainer->trainer->optimizer().set_progress(fraction);
  });
}

tessera_status tessera_trainer_save(tessera_trainer* trainer, const char* path) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    TESSERA_C_REQUIRE(path, "path");
    nn::save_training_snapshot(*trainer->trainer, path);
  });
}

tessera_status tessera_trainer_load(tessera_trainer* trainer, const char* path) {
  return guarded([&] {
    TESSERA_C_REQUIRE(trainer, "trainer");
    TESSERA_C_REQUIRE(path, "path");
    nn::load_training_snapshot(*trainer->trainer, path);
  });
}

}  // extern "C"
