#pragma once
// JSON configuration helpers (nlohmann::json). Configs use tiny-cuda-nn's keys; these
// helpers turn a missing file, malformed JSON, an unknown key or a wrong type into a
// tessera::Error that names the problem and the valid choices.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera {

using Json = nlohmann::json;

Json load_json_file(const std::string& path);
Json parse_json(const std::string& text, const std::string& what = "JSON text");

// Errors if `object` has a key not in `allowed` (so typos are never silently ignored).
void check_known_keys(const Json& object, const std::string& what,
                      std::initializer_list<const char*> allowed);

template <typename T>
T json_get(const Json& object, const char* key, const T& default_value);

// `name` in the spelling of the one of `choices` it equals ignoring ASCII case, or `name`
// unchanged when none does (the caller's error then lists the choices). tiny-cuda-nn
// compares otypes and enum names so: "EMA", "Ema" and "ema" name one optimizer.
std::string canonical_name(const std::string& name, std::initializer_list<const char*> choices);

// Where two configs differ, briefly, for a message ("network.n_neurons: file 64, this
// model 128; n_params: ..."; at most four, then a count): `file` is what a file holds,
// `mine` what the caller has, called `mine_label`.
std::string json_differences(const Json& file, const Json& mine, const std::string& mine_label);

// The size of the input file `path` (what: "config file", "parameter file", ...), after
// checking it is a regular file (not a folder, device or FIFO) of at most max_bytes, so a
// wrong path is refused before anything is read or allocated.
uintmax_t check_input_file(const std::string& path, const char* what, uintmax_t max_bytes);
// The whole file, after check_input_file.
std::string read_input_file(const std::string& path, const char* what, uintmax_t max_bytes);

// Writes `text` to `path` atomically: a temporary file in the same folder, then rename.
void write_file_atomic(const std::string& path, const std::string& text);
void write_file_atomic(const std::string& path, const void* data, size_t bytes);

}  // namespace tessera
