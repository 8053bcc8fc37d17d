// Parameter files (training_snapshot.h). Version 2 stores the model config; version 1
// (written before models were modules) stored {"network": ...} in tiny-cuda-nn's spelling
// and still loads.
#include <cmath>
#include <string_view>
#include <vector>

#include "tessera/core/binary_file.h"
#include "tessera/core/error.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera::nn {

namespace {
constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'E', 'R', 'A', '\x01'};
constexpr uint32_t kVersion = 2;
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

Json header_for(ModelTrainer& t) {
  const Module& m = t.model();
  return Json{{"model", m.config()}, {"input_width", m.input_width()}, {"output_width", m.output_width()},
              {"n_params", t.n_params()}};
}

// A version-1 header in this version's form; as stored where it does not convert.
Json upgraded_header(const Json& stored, const Module& model) {
  if (!stored.is_object() || !stored.contains("network")) return stored;
  try {
    const Json& net = stored.at("network");
    const bool encoded = net.is_object() && net.contains("encoding");
    Json c = stored;
    c.erase("network");
    c["model"] = normalized_model_config(
        tcnn_model_config(encoded ? net.at("encoding") : Json(), encoded ? net.at("network") : net,
                          json_get<uint32_t>(stored, "output_width", model.output_width())),
        model.input_width());
    return c;
  } catch (const Error&) {
    return stored;
  }
}
}  // namespace

void save_parameters(ModelTrainer& t, const std::string& path) {
  TESSERA_CHECK(!t.averaged_params_in_place(),
                "parameter file: the averaged parameters are in place of the live ones (use_averaged_params(false) "
                "first)");
  std::vector<float> params(t.n_params());
  download_from_view(t.stream(), params.data(), t.params(), params.size() * sizeof(float));
  BinaryWriter out(kMagic, kVersion, header_for(t));
  out.put_bytes(params.data(), params.size() * sizeof(float));
  out.put(fnv1a(params.data(), params.size() * sizeof(float)));
  write_file_atomic(path, out.bytes());
}

void load_parameters(ModelTrainer& t, const std::string& path) {
  // At most this model's file with a JSON header of up to 1 MiB: a larger file is refused
  // before it is read.
  const std::string bytes =
      read_input_file(path, "parameter file", sizeof(kMagic) + 8 + kMaxHeaderBytes + uint64_t(t.n_params()) * 4 + 8);
  load_parameters_from_memory(t, bytes, path);
}

void load_parameters_from_memory(ModelTrainer& t, std::string_view bytes, const std::string& path) {
  BinaryReader in(bytes, "parameter file", path);
  const Json raw = in.read_header(kMagic, 1, kVersion, kMaxHeaderBytes);
  const Json expected = header_for(t);
  const Json stored = in.version() == 1 ? upgraded_header(raw, t.model()) : raw;
  TESSERA_CHECK(stored == expected, "parameter file '{}' was saved from a different model ({})", path,
                json_differences(stored, expected, "this model"));
  std::vector<float> params(t.n_params());
  in.take(params.data(), params.size() * sizeof(float));
  uint64_t hash = 0;
  in.take(&hash, sizeof(hash));
  TESSERA_CHECK(hash == fnv1a(params.data(), params.size() * sizeof(float)),
                "parameter file '{}' is corrupt (checksum mismatch)", path);
  TESSERA_CHECK(in.position() == in.size(), "parameter file '{}' has {} unexpected trailing bytes", path,
                in.size() - in.position());
  // A matching checksum only says the file is what was saved: a run that diverged saves
  // NaNs, and training on from them would silently stay NaN.
  for (size_t i = 0; i < params.size(); ++i)
    TESSERA_CHECK(std::isfinite(params[i]), "parameter file '{}' holds a non-finite parameter ({} at index {})", path,
                  params[i], i);
  upload_to_view(t.stream(), t.params(), params.data(), params.size() * sizeof(float));
  t.params_changed();
}

}  // namespace tessera::nn
