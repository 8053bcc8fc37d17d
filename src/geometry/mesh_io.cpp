// Mesh files: OBJ, PLY (ASCII and binary), STL (ASCII and binary) and OFF, parsed here
// (assimp, the obvious library, aborted on a 40-byte malformed OFF and leaked on malformed
// STL within seconds of fuzzing: a user's bad file must be an error, not a crash). Every
// count, index and number is checked before it is used.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/geometry/mesh.h"

namespace tessera::geometry {

namespace {

// Builds the mesh: vertices, then polygons fanned into triangles, with every check.
class MeshBuilder {
 public:
  MeshBuilder(const std::string& name, const MeshLimits& limits) : name_(name), limits_(limits) {}
  void vertex(double x, double y, double z) {
    TESSERA_CHECK(std::isfinite(x) && std::isfinite(y) && std::isfinite(z) && std::fabs(x) < 3e38 &&
                      std::fabs(y) < 3e38 && std::fabs(z) < 3e38,
                  "{}: vertex {} is not finite ({}, {}, {})", name_, mesh_.n_vertices(), x, y, z);
    TESSERA_CHECK(mesh_.n_vertices() < (size_t(1) << 32) - 1, "{}: more than 2^32 vertices", name_);
    mesh_.positions.insert(mesh_.positions.end(), {float(x), float(y), float(z)});
  }
  // A polygon of vertex indices (0-based), fanned from its first vertex.
  void polygon(const int64_t* v, size_t n) {
    TESSERA_CHECK(n >= 3, "{}: a face with {} vertices", name_, n);
    for (size_t k = 0; k < n; ++k)
      TESSERA_CHECK(v[k] >= 0 && size_t(v[k]) < mesh_.n_vertices(), "{}: a face names vertex {} of {}", name_, v[k],
                    mesh_.n_vertices());
    TESSERA_CHECK(mesh_.n_triangles() + (n - 2) <= limits_.max_triangles, "{}: more triangles than the limit of {}",
                  name_, limits_.max_triangles);
    for (size_t k = 1; k + 1 < n; ++k)
      mesh_.triangles.insert(mesh_.triangles.end(), {uint32_t(v[0]), uint32_t(v[k]), uint32_t(v[k + 1])});
  }
  size_t n_vertices() const { return mesh_.n_vertices(); }
  Mesh finish() {
    TESSERA_CHECK(mesh_.n_triangles() > 0, "{}: the file has no triangles", name_);
    compute_vertex_normals(mesh_);
    return std::move(mesh_);
  }

 private:
  const std::string& name_;
  const MeshLimits& limits_;
  Mesh mesh_;
};

// Whitespace-separated tokens of one line at a time.
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  // The next line without its end (and without a trailing '\r'); false at the end.
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(pos_, end - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = end + 1;
    ++number_;
    return true;
  }
  size_t number() const { return number_; }
  size_t position() const { return std::min(pos_, text_.size()); }

 private:
  std::string_view text_;
  size_t pos_ = 0, number_ = 0;
};

std::string_view token(std::string_view& s) {
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  size_t e = b;
  while (e < s.size() && s[e] != ' ' && s[e] != '\t') ++e;
  const std::string_view t = s.substr(b, e - b);
  s.remove_prefix(e);
  return t;
}

template <typename T>
bool parse(std::string_view t, T& value) {
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  return ec == std::errc() && end == t.data() + t.size();
}

template <typename T>
T number(std::string_view& line, const std::string& name, size_t line_number, const char* what) {
  const std::string_view t = token(line);
  T value{};
  TESSERA_CHECK(parse(t, value), "{}:{}: {} '{}' is not a number", name, line_number, what,
                std::string(t.substr(0, 40)));
  return value;
}

Mesh parse_obj(std::string_view text, const std::string& name, const MeshLimits& limits) {
  MeshBuilder b(name, limits);
  Lines lines(text);
  std::string_view line;
  std::vector<int64_t> face;
  while (lines.next(line)) {
    const std::string_view kind = token(line);
    if (kind == "v") {
      const double x = number<double>(line, name, lines.number(), "coordinate");
      const double y = number<double>(line, name, lines.number(), "coordinate");
      const double z = number<double>(line, name, lines.number(), "coordinate");
      b.vertex(x, y, z);
    } else if (kind == "f") {
      face.clear();
      for (std::string_view t = token(line); !t.empty(); t = token(line)) {
        int64_t i = 0;  // "i", "i/t", "i//n", "i/t/n": the vertex index is the first field
        TESSERA_CHECK(parse(t.substr(0, t.find('/')), i) && i != 0, "{}:{}: face vertex '{}' is not an index", name,
                      lines.number(), std::string(t.substr(0, 40)));
        face.push_back(i > 0 ? i - 1 : int64_t(b.n_vertices()) + i);  // negative: relative to the end
        TESSERA_CHECK(face.size() <= 1u << 16, "{}:{}: a face with more than 65536 vertices", name, lines.number());
      }
      b.polygon(face.data(), face.size());
    }  // other statements (vt, vn, o, g, usemtl, ...) do not change the surface
  }
  return b.finish();
}

Mesh parse_off(std::string_view text, const std::string& name, const MeshLimits& limits) {
  MeshBuilder b(name, limits);
  Lines lines(text);
  std::string_view line;
  // Numbers in order across lines, comments (#) and blank lines skipped.
  std::string_view rest;
  auto next_token = [&]() -> std::string_view {
    for (;;) {
      std::string_view t = token(rest);
      if (!t.empty() && t.front() != '#') return t;
      TESSERA_CHECK(lines.next(line), "{}: the file ends early (line {})", name, lines.number());
      rest = line;
    }
  };
  auto integer = [&](const char* what) {
    const std::string_view t = next_token();
    int64_t v = 0;
    TESSERA_CHECK(parse(t, v), "{}:{}: {} '{}' is not an integer", name, lines.number(), what, std::string(t.substr(0, 40)));
    return v;
  };
  auto real = [&]() {
    const std::string_view t = next_token();
    double v = 0;
    TESSERA_CHECK(parse(t, v), "{}:{}: coordinate '{}' is not a number", name, lines.number(), std::string(t.substr(0, 40)));
    return v;
  };
  TESSERA_CHECK(next_token() == "OFF", "{}: not an OFF file (it starts with 'OFF')", name);
  const int64_t n_vertices = integer("vertex count"), n_faces = integer("face count");
  integer("edge count");
  TESSERA_CHECK(n_vertices >= 0 && n_faces >= 0 && size_t(n_vertices) <= text.size() && size_t(n_faces) <= text.size(),
                "{}: {} vertices and {} faces cannot fit in {} bytes", name, n_vertices, n_faces, text.size());
  for (int64_t v = 0; v < n_vertices; ++v) {
    const double x = real(), y = real(), z = real();
    b.vertex(x, y, z);
  }
  std::vector<int64_t> face;
  for (int64_t f = 0; f < n_faces; ++f) {
    const int64_t n = integer("face size");
    TESSERA_CHECK(n >= 3 && n <= 1 << 16, "{}:{}: a face with {} vertices", name, lines.number(), n);
    face.resize(size_t(n));
    for (auto& i : face) i = integer("vertex index");
    b.polygon(face.data(), face.size());
    rest = {};  // colours may follow on the face's line
  }
  return b.finish();
}

Mesh parse_stl(std::string_view data, const std::string& name, const MeshLimits& limits) {
  MeshBuilder b(name, limits);
  // Binary: an 80-byte header, a u32 count, 50 bytes per triangle. Some binary files start
  // with "solid" too, so the size decides.
  if (data.size() >= 84) {
    uint32_t n = 0;
    std::memcpy(&n, data.data() + 80, 4);
    if (data.size() == 84 + 50 * uint64_t(n)) {
      for (uint32_t t = 0; t < n; ++t) {
        int64_t face[3];
        for (int k = 0; k < 3; ++k) {
          float p[3];
          std::memcpy(p, data.data() + 84 + 50 * size_t(t) + 12 * (k + 1), 12);
          b.vertex(p[0], p[1], p[2]);
          face[k] = int64_t(b.n_vertices()) - 1;
        }
        b.polygon(face, 3);
      }
      return b.finish();
    }
  }
  Lines lines(data);
  std::string_view line;
  TESSERA_CHECK(lines.next(line) && token(line) == "solid",
                "{}: neither a binary STL ({} bytes is not 84 + 50 per triangle) nor an ASCII one ('solid ...')", name,
                data.size());
  std::vector<int64_t> loop;
  while (lines.next(line)) {
    const std::string_view kind = token(line);
    if (kind == "outer") {
      loop.clear();
    } else if (kind == "vertex") {
      const double x = number<double>(line, name, lines.number(), "coordinate");
      const double y = number<double>(line, name, lines.number(), "coordinate");
      const double z = number<double>(line, name, lines.number(), "coordinate");
      b.vertex(x, y, z);
      loop.push_back(int64_t(b.n_vertices()) - 1);
      TESSERA_CHECK(loop.size() <= 1u << 16, "{}:{}: a facet with more than 65536 vertices", name, lines.number());
    } else if (kind == "endloop") {
      b.polygon(loop.data(), loop.size());
      loop.clear();
    }
  }
  return b.finish();
}

// PLY: a header of elements and their properties, then the elements in ASCII or binary.
struct PlyProperty {
  std::string name;
  std::string type, count_type;  // count_type: a list's size type, else empty
};
struct PlyElement {
  std::string name;
  size_t count = 0;
  std::vector<PlyProperty> properties;
};

size_t ply_type_size(const std::string& t) {
  if (t == "char" || t == "uchar" || t == "int8" || t == "uint8") return 1;
  if (t == "short" || t == "ushort" || t == "int16" || t == "uint16") return 2;
  if (t == "int" || t == "uint" || t == "float" || t == "int32" || t == "uint32" || t == "float32") return 4;
  if (t == "double" || t == "float64") return 8;
  return 0;
}

// Reads PLY values one by one from the body, ASCII or binary (either byte order).
class PlyReader {
 public:
  PlyReader(std::string_view body, int format, const std::string& name) : body_(body), format_(format), name_(name) {}
  double read(const std::string& type) {
    if (format_ == 0) {
      std::string_view t;
      for (;;) {
        t = token(line_);
        if (!t.empty()) break;
        TESSERA_CHECK(lines_.next(line_), "{}: the PLY body ends early", name_);
      }
      double v = 0;
      TESSERA_CHECK(parse(t, v), "{}: PLY value '{}' is not a number", name_, std::string(t.substr(0, 40)));
      return v;
    }
    const size_t n = ply_type_size(type);
    TESSERA_CHECK(pos_ + n <= body_.size(), "{}: the PLY body ends early", name_);
    unsigned char bytes[8];
    std::memcpy(bytes, body_.data() + pos_, n);
    pos_ += n;
    if (format_ == 2) std::reverse(bytes, bytes + n);  // big-endian
    auto as = [&](auto v) {
      std::memcpy(&v, bytes, sizeof v);
      return double(v);
    };
    if (type == "char" || type == "int8") return as(int8_t());
    if (type == "uchar" || type == "uint8") return as(uint8_t());
    if (type == "short" || type == "int16") return as(int16_t());
    if (type == "ushort" || type == "uint16") return as(uint16_t());
    if (type == "int" || type == "int32") return as(int32_t());
    if (type == "uint" || type == "uint32") return as(uint32_t());
    if (type == "float" || type == "float32") return as(float());
    return as(double());
  }
  size_t remaining() const { return format_ == 0 ? body_.size() : body_.size() - pos_; }

 private:
  std::string_view body_;
  int format_;  // 0 ASCII, 1 binary little-endian, 2 binary big-endian
  const std::string& name_;
  size_t pos_ = 0;
  Lines lines_{body_};
  std::string_view line_;
};

Mesh parse_ply(std::string_view data, const std::string& name, const MeshLimits& limits) {
  Lines lines(data);
  std::string_view line;
  TESSERA_CHECK(lines.next(line) && token(line) == "ply", "{}: not a PLY file (it starts with 'ply')", name);
  int format = -1;
  std::vector<PlyElement> elements;
  for (;;) {
    TESSERA_CHECK(lines.next(line), "{}: the PLY header has no end_header", name);
    const std::string_view kind = token(line);
    if (kind == "end_header") break;
    if (kind == "format") {
      const std::string_view f = token(line);
      format = f == "ascii" ? 0 : f == "binary_little_endian" ? 1 : f == "binary_big_endian" ? 2 : -1;
      TESSERA_CHECK(format >= 0, "{}: PLY format '{}' is not ascii or binary", name, std::string(f.substr(0, 40)));
    } else if (kind == "element") {
      PlyElement e;
      e.name = std::string(token(line));
      e.count = number<size_t>(line, name, lines.number(), "element count");
      TESSERA_CHECK(e.count <= data.size(), "{}: {} {}s cannot fit in {} bytes", name, e.count, e.name, data.size());
      elements.push_back(e);
    } else if (kind == "property") {
      TESSERA_CHECK(!elements.empty(), "{}:{}: a property before any element", name, lines.number());
      PlyProperty p;
      p.type = std::string(token(line));
      if (p.type == "list") {
        p.count_type = std::string(token(line));
        p.type = std::string(token(line));
        TESSERA_CHECK(ply_type_size(p.count_type) > 0, "{}:{}: unknown PLY type '{}'", name, lines.number(),
                      p.count_type.substr(0, 40));
      }
      TESSERA_CHECK(ply_type_size(p.type) > 0, "{}:{}: unknown PLY type '{}'", name, lines.number(),
                    p.type.substr(0, 40));
      p.name = std::string(token(line));
      elements.back().properties.push_back(p);
    }  // comment, obj_info
    TESSERA_CHECK(elements.size() <= 64, "{}: more than 64 PLY elements", name);
  }
  TESSERA_CHECK(format >= 0, "{}: the PLY header has no format line", name);
  MeshBuilder b(name, limits);
  PlyReader r(data.substr(lines.position()), format, name);
  std::vector<int64_t> face;
  for (const PlyElement& e : elements) {
    const bool vertices = e.name == "vertex", faces = e.name == "face";
    int axis[3] = {-1, -1, -1};
    for (size_t i = 0; i < e.properties.size(); ++i)
      for (int k = 0; k < 3; ++k)
        if (e.properties[i].name == std::string(1, char('x' + k)) && e.properties[i].count_type.empty()) axis[k] = int(i);
    TESSERA_CHECK(!vertices || (axis[0] >= 0 && axis[1] >= 0 && axis[2] >= 0),
                  "{}: the PLY vertices have no x, y and z", name);
    for (size_t item = 0; item < e.count; ++item) {
      double xyz[3] = {0, 0, 0};
      for (size_t i = 0; i < e.properties.size(); ++i) {
        const PlyProperty& p = e.properties[i];
        if (p.count_type.empty()) {
          const double v = r.read(p.type);
          for (int k = 0; k < 3; ++k)
            if (int(i) == axis[k]) xyz[k] = v;
          continue;
        }
        const double n = r.read(p.count_type);
        TESSERA_CHECK(n >= 0 && n <= 65536 && n == std::floor(n), "{}: a PLY list of {} values", name, n);
        const bool indices = faces && (p.name == "vertex_indices" || p.name == "vertex_index");
        face.clear();
        for (int k = 0; k < int(n); ++k) {
          const double v = r.read(p.type);
          if (indices) {
            TESSERA_CHECK(v == std::floor(v) && std::fabs(v) < 9e15, "{}: PLY vertex index {} is not an integer", name, v);
            face.push_back(int64_t(v));
          }
        }
        if (indices) b.polygon(face.data(), face.size());
      }
      if (vertices) b.vertex(xyz[0], xyz[1], xyz[2]);
    }
  }
  return b.finish();
}

// "OBJ", ".obj" -> "obj".
std::string format_name(std::string format) {
  if (!format.empty() && format.front() == '.') format.erase(0, 1);
  std::transform(format.begin(), format.end(), format.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return format;
}

}  // namespace

Mesh load_mesh(const std::string& path, const MeshLimits& limits) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  TESSERA_CHECK(!ec, "{}: cannot read the mesh ({})", path, ec.message());
  TESSERA_CHECK(bytes <= limits.max_bytes, "{}: {} bytes, more than the limit of {}", path, bytes, limits.max_bytes);
  std::ifstream in(path, std::ios::binary);
  std::string data(bytes, '\0');
  TESSERA_CHECK(in && in.read(data.data(), std::streamsize(bytes)), "{}: cannot read the mesh", path);
  const std::string format = format_name(std::filesystem::path(path).extension().string());
  TESSERA_CHECK(!format.empty(), "{}: the file name has no extension, which names the mesh format ({})", path,
                kMeshFormats);
  return load_mesh_from_memory(data.data(), data.size(), path, format, limits);
}

Mesh load_mesh_from_memory(const void* data, size_t size, const std::string& name, const std::string& format,
                           const MeshLimits& limits) {
  TESSERA_CHECK(size > 0, "{}: the file is empty", name);
  TESSERA_CHECK(size <= limits.max_bytes, "{}: {} bytes, more than the limit of {}", name, size, limits.max_bytes);
  const std::string_view text(static_cast<const char*>(data), size);
  const std::string ext = format_name(format);
  if (ext == "obj") return parse_obj(text, name, limits);
  if (ext == "ply") return parse_ply(text, name, limits);
  if (ext == "stl") return parse_stl(text, name, limits);
  if (ext == "off") return parse_off(text, name, limits);
  throw Error(format_message("{}: mesh format '{}' is not read here; valid: {}", name, ext, kMeshFormats));
}

}  // namespace tessera::geometry
