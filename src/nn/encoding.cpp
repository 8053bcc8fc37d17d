#include "tessera/nn/encoding.h"

#include <string>
#include <vector>

#include "module_internal.h"
#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "ops/encoding_math.h"

namespace tessera::nn {

void Encoding::bind_params(const ParamBinding&, const ParamBinding& tables) { p_ = tables.slice(0, n_params()); }

void Encoding::initialize(uint64_t seed) {
  if (!n_params()) return;
  TESSERA_CHECK(p_.bound(), "encoding: parameters are not bound");
  std::vector<float> host(n_params());
  Pcg32 rng(seed, 0x9e3779b97f4a7c15ULL);
  initialize_tables(host.data(), rng);
  upload_to_view(stream(), p_.params, host.data(), host.size() * sizeof(float));
  params_changed();
}

void Encoding::params_changed() {
  detail::refresh_half(stream(), p_, n_params());
}

void Encoding::inference(ConstView in, View out) {
  check_shapes("encoding inference", in, out);
  if (in.rows() == 0) return;
  TESSERA_CHECK(!n_params() || p_.bound(), "encoding: parameters are not bound");
  encode(in, out);
}

std::unique_ptr<ModuleContext> Encoding::forward(ConstView in, View out) {
  inference(in, out);
  return std::make_unique<ModuleContext>();
}

void Encoding::backward(ModuleContext&, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) {
  check_shapes("encoding backward", in, dL_dout);
  if (n_params()) {
    TESSERA_CHECK(p_.bound(), "encoding: parameters are not bound");
    if (mode == GradientMode::overwrite) zero_view_bytes(stream(), p_.gradients);
  }
  if (in.rows() == 0 || (!n_params() && dL_din.empty())) return;
  encode_backward(in, dL_dout, dL_din);
}

namespace {

constexpr const char* kEncodingChoices =
    "HashGrid, DenseGrid, Grid, Frequency, SphericalHarmonics, OneBlob, TriangleWave, Identity, Composite";

// Frequency, TriangleWave, OneBlob, SphericalHarmonics, Identity: no parameters.
class ElementwiseEncoding final : public Encoding {
 public:
  ElementwiseEncoding(const ops::ElementwiseEncoding& e, Device device) : Encoding(device), e_(e) {}
  uint32_t input_width() const override { return e_.n_dims; }
  uint32_t output_width() const override { return e_.output_width(); }
  Json config() const override {
    switch (e_.kind) {
      case ops::ElementwiseKind::Identity:
        return Json{{"otype", "Identity"}, {"scale", e_.scale}, {"offset", e_.offset}};
      case ops::ElementwiseKind::Frequency: return Json{{"otype", "Frequency"}, {"n_frequencies", e_.order}};
      case ops::ElementwiseKind::TriangleWave: return Json{{"otype", "TriangleWave"}, {"n_frequencies", e_.order}};
      case ops::ElementwiseKind::OneBlob: return Json{{"otype", "OneBlob"}, {"n_bins", e_.order}};
      case ops::ElementwiseKind::SphericalHarmonics: return Json{{"otype", "SphericalHarmonics"}, {"degree", e_.order}};
    }
    return {};
  }

 protected:
  void encode(ConstView in, View out) override { ops::call<ops::ElementwiseEncode>(stream(), e_, in, out); }
  void encode_backward(ConstView in, ConstView dL_dout, View dL_din) override {
    if (!dL_din.empty()) ops::call<ops::ElementwiseEncodeBackward>(stream(), e_, in, dL_dout, dL_din);
  }

 public:
  void backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout, View dL_din,
                               GradientMode) override {
    check_shapes("encoding second backward", in, dL_dout);
    if (in.rows() == 0 || (dL_ddLdout.empty() && dL_din.empty())) return;
    ops::call<ops::ElementwiseEncodeBackwardBackward>(stream(), e_, in, dL_dout, dL_ddLdin, dL_ddLdout, dL_din);
  }

 private:
  ops::ElementwiseEncoding e_;
};

// HashGrid / DenseGrid: trainable tables, fp16 copy on CUDA.
class GridEncoding final : public Encoding {
 public:
  GridEncoding(const ops::GridLayout& g, Json config, Device device)
      : Encoding(device), g_(g), config_(std::move(config)) {}
  uint32_t input_width() const override { return g_.n_dims; }
  uint32_t output_width() const override { return g_.output_width(); }
  size_t n_params() const override { return size_t(g_.n_params()); }
  Json config() const override { return config_; }
  const ops::GridLayout* grid_layout() const override { return &g_; }
  bool can_output_half() const override { return backend_for(device_).supports<ops::GridEncodeHalf>(); }

 protected:
  void initialize_tables(float* host, Pcg32& rng) override {
    for (size_t i = 0; i < n_params(); ++i) host[i] = rng.uniform(-ops::kGridInitRange, ops::kGridInitRange);
  }
  void encode(ConstView in, View out) override {
    if (out.dtype == DType::f16) ops::call<ops::GridEncodeHalf>(stream(), g_, p_.params, p_.params_half, in, out);
    else ops::call<ops::GridEncode>(stream(), g_, p_.params, p_.params_half, in, out);
  }
  void encode_backward(ConstView in, ConstView dL_dout, View dL_din) override {
    ops::call<ops::GridEncodeBackward>(stream(), g_, p_.params, p_.params_half, in, dL_dout, p_.gradients, dL_din);
  }

 public:
  bool input_gradient_only(ModuleContext&, ConstView in, ConstView dL_dout, View dL_din) override {
    check_shapes("grid encoding input gradient", in, dL_dout);
    TESSERA_CHECK(p_.bound(), "grid encoding: parameters are not bound");
    if (in.rows() && !dL_din.empty())
      ops::call<ops::GridEncodeBackward>(stream(), g_, p_.params, p_.params_half, in, dL_dout, View(), dL_din);
    return true;
  }

  void backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout, View dL_din,
                               GradientMode mode) override {
    check_shapes("grid encoding second backward", in, dL_dout);
    TESSERA_CHECK(p_.bound() && !p_.gradients.empty(), "grid encoding: parameters and gradients are not bound");
    if (mode == GradientMode::overwrite) zero_view_bytes(stream(), p_.gradients);
    if (in.rows() == 0) return;
    ops::call<ops::GridEncodeBackwardBackward>(stream(), g_, p_.params, p_.params_half, in, dL_dout, dL_ddLdin,
                                               dL_ddLdout, p_.gradients, dL_din, View());
  }

  bool second_backward_outputs(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout) override {
    check_shapes("grid encoding second backward", in, dL_dout);
    TESSERA_CHECK(p_.bound(), "grid encoding: parameters are not bound");
    if (in.rows() && !dL_ddLdout.empty())
      ops::call<ops::GridEncodeBackwardBackward>(stream(), g_, p_.params, p_.params_half, in, dL_dout, dL_ddLdin,
                                                 dL_ddLdout, View(), View(), View());
    return true;
  }

  void second_backward_params(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, ConstView dL_dout_first,
                              GradientMode mode) override {
    check_shapes("grid encoding second backward", in, dL_dout);
    TESSERA_CHECK(p_.bound() && !p_.gradients.empty(), "grid encoding: parameters and gradients are not bound");
    if (mode == GradientMode::overwrite) zero_view_bytes(stream(), p_.gradients);
    if (in.rows() == 0) return;
    ops::call<ops::GridEncodeBackwardBackward>(stream(), g_, p_.params, p_.params_half, in, dL_dout, dL_ddLdin, View(),
                                               p_.gradients, View(), dL_dout_first);
  }

 private:
  ops::GridLayout g_;
  Json config_;
};

uint32_t positive(const Json& c, const char* key, uint32_t def, const std::string& otype) {
  const uint32_t v = json_get<uint32_t>(c, key, def);
  TESSERA_CHECK(v >= 1, "{}: {} must be at least 1", otype, key);
  return v;
}

std::unique_ptr<Module> create_grid(const Json& c, const std::string& otype, uint32_t n_dims, Device device) {
  check_known_keys(c, otype + " config",
                   {"otype", "type", "n_levels", "n_features_per_level", "log2_hashmap_size", "base_resolution",
                    "per_level_scale", "interpolation", "fixed_point_pos", "n_dims_to_encode"});
  std::string type = otype == "DenseGrid" ? "Dense" : "Hash";
  if (otype == "Grid") type = canonical_name(json_get<std::string>(c, "type", "Hash"), {"Hash", "Dense"});
  TESSERA_CHECK(type == "Hash" || type == "Dense", "{}: grid type '{}' is not supported; valid choices: Hash, Dense",
                otype, type);
  TESSERA_CHECK(!json_get<bool>(c, "fixed_point_pos", false), "{}: fixed_point_pos = true is not supported", otype);
  const std::string interp = canonical_name(json_get<std::string>(c, "interpolation", "Linear"), {"Linear", "Smoothstep"});
  ops::GridInterpolation gi;
  if (interp == "Linear") gi = ops::GridInterpolation::Linear;
  else if (interp == "Smoothstep") gi = ops::GridInterpolation::Smoothstep;
  else throw Error(format_message("{}: interpolation '{}' is not supported; valid choices: Linear, Smoothstep", otype, interp));
  const uint32_t n_levels = json_get<uint32_t>(c, "n_levels", 16);
  const uint32_t n_features = json_get<uint32_t>(c, "n_features_per_level", 2);
  const uint32_t log2_size = json_get<uint32_t>(c, "log2_hashmap_size", 19);
  const float base = json_get<float>(c, "base_resolution", 16.0f);
  const float scale = json_get<float>(c, "per_level_scale", 2.0f);
  const ops::GridLayout g =
      ops::make_grid_layout(n_dims, n_levels, n_features, log2_size, base, scale, type == "Hash", gi);
  Json cfg{{"otype", type == "Hash" ? "HashGrid" : "DenseGrid"}, {"n_levels", n_levels},
           {"n_features_per_level", n_features}, {"base_resolution", base}, {"per_level_scale", scale},
           {"interpolation", interp}};
  if (type == "Hash") cfg["log2_hashmap_size"] = log2_size;
  return std::make_unique<GridEncoding>(g, cfg, device);
}

// Widths an encoding may produce: computed in 64 bits and capped, so a huge n_bins or a
// Composite whose parts add up past 2^32 is an error, not a wrapped width.
constexpr uint64_t kMaxEncodingWidth = 1 << 16;

std::unique_ptr<Module> create_encoding_at(const Json& c, uint32_t n_dims, Device device, int depth);

}  // namespace

std::unique_ptr<Module> create_encoding(const Json& c, uint32_t n_dims, Device device) {
  return create_encoding_at(c, n_dims, device, 0);
}

std::string canonical_encoding_otype(const std::string& otype) {
  return canonical_name(otype, {"HashGrid", "DenseGrid", "Grid", "Composite", "Identity", "Frequency", "TriangleWave",
                                "OneBlob", "SphericalHarmonics"});
}

bool is_grid_encoding(const std::string& otype) { return otype == "HashGrid" || otype == "DenseGrid" || otype == "Grid"; }

namespace {

std::unique_ptr<Module> create_encoding_at(const Json& c, uint32_t n_dims, Device device, int depth) {
  TESSERA_CHECK(depth <= kMaxCompositeDepth, "Composite encodings nested deeper than {}", kMaxCompositeDepth);
  TESSERA_CHECK(c.is_object() && c.contains("otype"), "encoding config needs an \"otype\"; valid choices: {}",
                kEncodingChoices);
  TESSERA_CHECK(n_dims >= 1, "an encoding needs at least one input dimension");
  const std::string otype = canonical_encoding_otype(json_get<std::string>(c, "otype", ""));
  if (is_grid_encoding(otype)) return create_grid(c, otype, n_dims, device);
  if (otype == "Composite") {
    check_known_keys(c, "Composite config", {"otype", "nested", "n_dims_to_encode"});
    TESSERA_CHECK(c.contains("nested") && c.at("nested").is_array() && !c.at("nested").empty(),
                  "Composite needs a non-empty \"nested\" array of encodings");
    std::vector<Branch> parts;
    uint32_t used = 0;
    const auto& nested = c.at("nested");
    for (size_t i = 0; i < nested.size(); ++i) {
      const uint32_t left = n_dims - used;
      // A trailing part for whatever dims are left, when none are (instant-ngp's direction
      // encoding: SH on 3 dims, then Identity on any extra dims), encodes nothing.
      if (left == 0 && nested[i].is_object() && !nested[i].contains("n_dims_to_encode")) continue;
      TESSERA_CHECK(left > 0, "Composite: nested encoding {} has no input dims left ({} in total)", i, n_dims);
      const uint32_t dims = json_get<uint32_t>(nested[i], "n_dims_to_encode", left);
      TESSERA_CHECK(dims >= 1 && dims <= left, "Composite: nested encoding {} wants {} dims but {} are left", i, dims,
                    left);
      parts.push_back({used, create_encoding_at(nested[i], dims, device, depth + 1)});
      used += dims;
    }
    TESSERA_CHECK(used == n_dims, "Composite: nested encodings cover {} of the {} input dims", used, n_dims);
    uint64_t width = 0;
    for (const Branch& p : parts) width += p.module->output_width();
    TESSERA_CHECK(width <= kMaxEncodingWidth, "Composite: the nested encodings put out {} columns; at most {}", width,
                  kMaxEncodingWidth);
    return make_parallel(n_dims, std::move(parts));
  }
  ops::ElementwiseEncoding e;
  e.n_dims = n_dims;
  if (otype == "Identity") {
    check_known_keys(c, "Identity config", {"otype", "scale", "offset", "n_dims_to_encode"});
    e.kind = ops::ElementwiseKind::Identity;
    e.scale = json_get<float>(c, "scale", 1.0f);
    e.offset = json_get<float>(c, "offset", 0.0f);
  } else if (otype == "Frequency" || otype == "TriangleWave") {
    check_known_keys(c, otype + " config", {"otype", "n_frequencies", "n_dims_to_encode"});
    e.kind = otype == "Frequency" ? ops::ElementwiseKind::Frequency : ops::ElementwiseKind::TriangleWave;
    e.order = positive(c, "n_frequencies", 12, otype);
    TESSERA_CHECK(e.order <= 32, "{}: n_frequencies {} is too large (at most 32)", otype, e.order);
  } else if (otype == "OneBlob") {
    check_known_keys(c, "OneBlob config", {"otype", "n_bins", "n_dims_to_encode"});
    e.kind = ops::ElementwiseKind::OneBlob;
    e.order = positive(c, "n_bins", 16, otype);
  } else if (otype == "SphericalHarmonics") {
    check_known_keys(c, "SphericalHarmonics config", {"otype", "degree", "n_dims_to_encode"});
    e.kind = ops::ElementwiseKind::SphericalHarmonics;
    e.order = json_get<uint32_t>(c, "degree", 4);
    TESSERA_CHECK(e.order >= 1 && e.order <= ops::kMaxShDegree,
                  "SphericalHarmonics: degree {} is not supported; valid: 1 to {}", e.order, ops::kMaxShDegree);
    TESSERA_CHECK(n_dims == 3, "SphericalHarmonics encodes 3-D directions but gets {} input dims", n_dims);
  } else {
    throw Error(format_message("unknown encoding otype '{}'; valid choices: {}", otype, kEncodingChoices));
  }
  const uint64_t width = e.kind == ops::ElementwiseKind::SphericalHarmonics
                             ? uint64_t(e.order) * e.order
                             : uint64_t(e.n_dims) * (e.kind == ops::ElementwiseKind::Frequency ? 2ull * e.order
                                                     : e.kind == ops::ElementwiseKind::Identity ? 1ull
                                                                                                : uint64_t(e.order));
  TESSERA_CHECK(width <= kMaxEncodingWidth, "{}: {} input dims would give {} output columns; at most {}", otype, n_dims,
                width, kMaxEncodingWidth);
  return std::make_unique<ElementwiseEncoding>(e, device);
}

}  // namespace
}  // namespace tessera::nn
