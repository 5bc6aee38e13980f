// The mesh the VTK tests write: nx x ny points on the unit square, x = i/(nx-1), y = j/(ny-1), cut into
// blocks of whole rows, two triangles per grid square inside a block (none across blocks). With more
// than one rank the last rank owns no points, so every run has an empty piece.
#pragma once

#include <cstdint>
#include <vector>

#include "surrogate/vtk.hpp"

namespace vtk_test {

struct LocalMesh {
  std::int64_t points = 0;
  std::vector<double> coords;  // points x 2, C order
  std::vector<std::int64_t> connectivity, offsets;
  std::vector<surrogate::VtkCell> types;
  std::int64_t cells() const { return static_cast<std::int64_t>(types.size()); }
};

/// Rows [first, last) of rank `rank` out of `size`.
inline void row_range(int ny, int rank, int size, int& first, int& last) {
  const int owners = size > 1 ? size - 1 : 1;
  if (rank >= owners) {
    first = last = 0;
    return;
  }
  first = ny * rank / owners;
  last = ny * (rank + 1) / owners;
}

inline LocalMesh local_mesh(int nx, int ny, int rank, int size) {
  LocalMesh m;
  int j0 = 0, j1 = 0;
  row_range(ny, rank, size, j0, j1);
  for (int j = j0; j < j1; ++j)
    for (int i = 0; i < nx; ++i) {
      m.coords.push_back(static_cast<double>(i) / (nx - 1));
      m.coords.push_back(static_cast<double>(j) / (ny - 1));
    }
  m.points = static_cast<std::int64_t>(j1 - j0) * nx;
  for (int j = j0; j + 1 < j1; ++j)
    for (int i = 0; i + 1 < nx; ++i) {
      const std::int64_t a = static_cast<std::int64_t>(j - j0) * nx + i, b = a + 1, c = a + nx, d = c + 1;
      for (const std::int64_t p : {a, b, d, a, d, c}) m.connectivity.push_back(p);
      m.offsets.push_back(static_cast<std::int64_t>(m.connectivity.size()) - 3);
      m.offsets.push_back(static_cast<std::int64_t>(m.connectivity.size()));
      m.types.push_back(surrogate::VtkCell::triangle);
      m.types.push_back(surrogate::VtkCell::triangle);
    }
  return m;
}

/// The analytic scalar field of the tests.
inline double field(double x, double y, double time) { return x + 2 * y + time; }

}  // namespace vtk_test
