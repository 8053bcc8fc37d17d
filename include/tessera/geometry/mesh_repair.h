#pragma once
// Meshes as they come from scanners, CAD exports and the web: triangles wound either way,
// components wound differently from each other, a few faces flipped, repeated corners and
// duplicate faces. orient_outward makes the winding consistent so that the generalized
// winding number (mesh_queries.h) reads inside as 1 whatever the file's convention:
//  1. vertices at the same position count as one (STL lists every corner anew);
//  2. triangles with a repeated corner, and repeats of an earlier triangle's three corners
//     (either winding), are dropped;
//  3. across every edge shared by exactly two triangles the two must run the edge in
//     opposite directions: each edge-connected component is made consistent breadth first,
//     and the triangles that went against their component's majority are the flipped faces;
//  4. each component is then turned whole so that it bounds its volume outward (its signed
//     volume, about its own centroid, positive), unless it lies wholly inside an odd number
//     of other components (the inner wall of a hollow shell), which bounds a cavity and so
//     faces inward.
// Open borders and holes stay as they are: the winding number tolerates them.
#include <cstddef>
#include <string>

#include "tessera/core/config.h"
#include "tessera/geometry/mesh.h"

namespace tessera::geometry {

struct MeshRepair {
  size_t triangles_in = 0, triangles_out = 0;
  size_t degenerate_dropped = 0;     // a corner repeated (also when two vertices share a position)
  size_t duplicates_dropped = 0;     // the same three corners as an earlier triangle
  size_t components = 0;             // edge-connected components
  size_t components_reoriented = 0;  // turned whole (their majority wound inward, or nested and wound outward)
  size_t faces_flipped = 0;          // turned to agree with their neighbours (against their component's majority)
  size_t open_edges = 0;             // edges of one triangle (0: closed)
  size_t nonmanifold_edges = 0;      // edges of three or more triangles (orientation is not carried across)
  size_t inconsistent_edges = 0;     // left disagreeing (a non-orientable surface, such as a Moebius strip)
  bool changed() const { return degenerate_dropped + duplicates_dropped + components_reoriented + faces_flipped > 0; }
  // One line for people ("2 components, 1 re-oriented, ...") and the same counts as JSON.
  std::string summary() const;
  Json to_json() const;
};

// Repairs `mesh` in place as above (vertices untouched; vertex normals recomputed when a
// triangle changed). Throws, naming `name`, if no triangle with three distinct corners is left.
MeshRepair orient_outward(Mesh& mesh, const std::string& name = "mesh");

}  // namespace tessera::geometry
