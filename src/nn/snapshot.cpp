// Parameter snapshot files.
//   bytes 0-7   magic "TESSERA\x01"
//   u32         format version
//   u32         length of the JSON header, then the header: network config, widths, n_params
//   f32 x n     parameters (padded layout)
//   u64         FNV-1a hash of the parameter bytes
#include <cmath>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tessera/core/binary_file.h"
#include "tessera/core/error.h"
#include "tessera/nn/trainer.h"

namespace tessera::nn {

namespace {
constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'E', 'R', 'A', '\x01'};
constexpr uint32_t kVersion = 1;

Json header_for(Network& net) {
  return Json{{"network", net.config()}, {"input_width", net.input_width()}, {"output_width", net.output_width()},
              {"n_params", net.n_params()}};
}
}  // namespace

void save_parameters(Network& net, const std::string& path) {
  std::vector<float> params(net.n_params());
  download_from_view(net.device(), params.data(), net.params(), params.size() * sizeof(float));
  BinaryWriter out(kMagic, kVersion, header_for(net));
  out.put_bytes(params.data(), params.size() * sizeof(float));
  out.put(fnv1a(params.data(), params.size() * sizeof(float)));
  write_file_atomic(path, out.bytes());
}

namespace {
constexpr uint64_t kMaxHeaderBytes = 1 << 20;
}

void load_parameters(Network& net, const std::string& path) {
  // At most this network's snapshot with a JSON header of up to 1 MiB: a larger file is
  // refused before it is read.
  const std::string bytes = read_input_file(
      path, "parameter file", sizeof(kMagic) + 8 + kMaxHeaderBytes + uint64_t(net.n_params()) * 4 + 8);
  load_parameters_from_memory(net, bytes, path);
}

void load_parameters_from_memory(Network& net, std::string_view bytes, const std::string& path) {
  BinaryReader in(bytes, "parameter file", path);
  const Json stored = in.read_header(kMagic, kVersion, kMaxHeaderBytes);
  const Json expected = header_for(net);
  TESSERA_CHECK(stored == expected, "parameter file '{}' was saved from a different network ({})", path,
                json_differences(stored, expected, "this network"));
  std::vector<float> params(net.n_params());
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
  upload_to_view(net.device(), net.params(), params.data(), params.size() * sizeof(float));
  net.params_changed();
}

}  // namespace tessera::nn
