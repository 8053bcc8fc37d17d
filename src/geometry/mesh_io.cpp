// Meshes from files through assimp (the formats it reads), checked before anything uses them.
#include <assimp/Importer.hpp>
#include <assimp/postprocess.h>
#include <assimp/scene.h>

#include <cmath>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/geometry/mesh.h"

namespace tessera::geometry {

namespace {

// SortByPType puts points and lines in meshes of their own, which mesh_from_scene skips.
constexpr unsigned kPostProcess = aiProcess_Triangulate | aiProcess_JoinIdenticalVertices |
                                  aiProcess_PreTransformVertices | aiProcess_SortByPType;

Mesh mesh_from_scene(const aiScene* scene, const std::string& name, const MeshLimits& limits) {
  Mesh mesh;
  size_t triangles = 0, vertices = 0;
  for (unsigned m = 0; m < scene->mNumMeshes; ++m) {
    const aiMesh* part = scene->mMeshes[m];
    if (!(part->mPrimitiveTypes & aiPrimitiveType_TRIANGLE)) continue;
    triangles += part->mNumFaces;
    vertices += part->mNumVertices;
  }
  TESSERA_CHECK(triangles > 0, "{}: the file has no triangles", name);
  TESSERA_CHECK(triangles <= limits.max_triangles, "{}: {} triangles, more than the limit of {}", name, triangles,
                limits.max_triangles);
  TESSERA_CHECK(vertices < (size_t(1) << 32), "{}: {} vertices, more than 2^32", name, vertices);
  mesh.positions.reserve(vertices * 3);
  mesh.triangles.reserve(triangles * 3);
  for (unsigned m = 0; m < scene->mNumMeshes; ++m) {
    const aiMesh* part = scene->mMeshes[m];
    if (!(part->mPrimitiveTypes & aiPrimitiveType_TRIANGLE)) continue;
    const uint32_t first = uint32_t(mesh.n_vertices());
    for (unsigned v = 0; v < part->mNumVertices; ++v) {
      const aiVector3D& p = part->mVertices[v];
      TESSERA_CHECK(std::isfinite(p.x) && std::isfinite(p.y) && std::isfinite(p.z),
                    "{}: vertex {} of mesh {} is not finite ({}, {}, {})", name, v, m, p.x, p.y, p.z);
      mesh.positions.insert(mesh.positions.end(), {p.x, p.y, p.z});
    }
    for (unsigned f = 0; f < part->mNumFaces; ++f) {
      const aiFace& face = part->mFaces[f];
      if (face.mNumIndices != 3) continue;
      for (int k = 0; k < 3; ++k) {
        TESSERA_CHECK(face.mIndices[k] < part->mNumVertices, "{}: face {} of mesh {} names vertex {} of {}", name, f,
                      m, face.mIndices[k], part->mNumVertices);
        mesh.triangles.push_back(first + face.mIndices[k]);
      }
    }
  }
  TESSERA_CHECK(mesh.n_triangles() > 0, "{}: the file has no triangles", name);
  compute_vertex_normals(mesh);
  return mesh;
}

}  // namespace

Mesh load_mesh(const std::string& path, const MeshLimits& limits) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  TESSERA_CHECK(!ec, "{}: cannot read the mesh ({})", path, ec.message());
  TESSERA_CHECK(bytes <= limits.max_bytes, "{}: {} bytes, more than the limit of {}", path, bytes, limits.max_bytes);
  Assimp::Importer importer;
  const aiScene* scene = importer.ReadFile(path, kPostProcess);
  TESSERA_CHECK(scene && scene->mRootNode, "{}: not a mesh file this build reads ({})", path, importer.GetErrorString());
  return mesh_from_scene(scene, path, limits);
}

Mesh load_mesh_from_memory(const void* data, size_t size, const std::string& name, const std::string& format_hint,
                           const MeshLimits& limits) {
  TESSERA_CHECK(size > 0, "{}: empty", name);
  TESSERA_CHECK(size <= limits.max_bytes, "{}: {} bytes, more than the limit of {}", name, size, limits.max_bytes);
  Assimp::Importer importer;
  const aiScene* scene = importer.ReadFileFromMemory(data, size, kPostProcess, format_hint.c_str());
  TESSERA_CHECK(scene && scene->mRootNode, "{}: not a mesh this build reads ({})", name, importer.GetErrorString());
  return mesh_from_scene(scene, name, limits);
}

void compute_vertex_normals(Mesh& mesh) {
  mesh.normals.assign(mesh.positions.size(), 0.0f);
  for (size_t t = 0; t < mesh.n_triangles(); ++t) {
    const uint32_t* v = &mesh.triangles[3 * t];
    const float* a = &mesh.positions[3 * v[0]];
    const float* b = &mesh.positions[3 * v[1]];
    const float* c = &mesh.positions[3 * v[2]];
    const float e1[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]}, e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
    // The cross product's length is twice the area: the sum weights faces by area.
    const float n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0]};
    for (int k = 0; k < 3; ++k)
      for (int d = 0; d < 3; ++d) mesh.normals[3 * v[k] + d] += n[d];
  }
  for (size_t v = 0; v < mesh.n_vertices(); ++v) {
    float* n = &mesh.normals[3 * v];
    const float len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    if (len > 0 && std::isfinite(len))
      for (int d = 0; d < 3; ++d) n[d] /= len;
    else
      n[0] = n[1] = n[2] = 0.0f;
  }
}

}  // namespace tessera::geometry
