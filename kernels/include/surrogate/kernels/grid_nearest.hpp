// The exact k-nearest search on a uniform grid per sample, written once for the CPU (sequoia::nearest_lists)
// and the device (kernels/cuda/nearest.cu, the host backend too): the grid's sizing, a position's cell, the
// k best kept in (squared distance, node) order, and the search in rings of cells around the query until
// no unvisited cell can hold a node before the k-th best (share/docs/cuda.md, "Nearest-neighbour lists").
// Distances: sum_c (double(q_c) - double(p_c))^2 from c = 0, each operation rounded on its own (callers
// on the CPU compile with -ffp-contract=off; the device uses the _rn intrinsics).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define SURROGATE_GRID_NEAREST __host__ __device__ __forceinline__
#else
#define SURROGATE_GRID_NEAREST inline
#endif

namespace surrogate::kernels::grid_nearest {

/// The largest k (the k best live in the searching thread's own memory).
inline constexpr int kMaxK = 32;
inline constexpr int kMaxAxisCells = 1 << 20;

/// A sample's grid: the cell of a position p holds floor((p - lo) / h) per axis, clamped to the grid; the
/// sample's cells are base .. base + cells() - 1 among all samples' cells, x fastest.
struct Grid {
  double lo[3];
  double h;
  int dims[3];
  long long base;
  SURROGATE_GRID_NEAREST long long cells() const { return static_cast<long long>(dims[0]) * dims[1] * dims[2]; }
};

namespace detail {

/// The cells of edge h over the extents (at least one, at most kMaxAxisCells per axis), h grown by 1.25
/// until there are at most `cap`.
SURROGATE_GRID_NEAREST void fit_cells(Grid& g, const double (&ext)[3], double h, long long cap) {
  for (;;) {
    long long cells = 1;
    for (int c = 0; c < 3; ++c) {
      const double d = ext[c] > 0.0 ? floor(ext[c] / h) + 1.0 : 1.0;
      g.dims[c] = d < kMaxAxisCells ? static_cast<int>(d) : kMaxAxisCells;
      cells *= g.dims[c];
    }
    if (cells <= cap) break;
    h *= 1.25;
  }
  g.h = h;
}

}  // namespace detail

/// The grid of a sample of n nodes whose bounding box is [mn, mx]: about two nodes per cell over the axes
/// the sample spans, at most max(1, n) cells and kMaxAxisCells per axis (base left 0).
SURROGATE_GRID_NEAREST Grid make_grid(const float (&mn)[3], const float (&mx)[3], long long n) {
  Grid g{};
  const long long cap = n > 1 ? n : 1;
  double ext[3], volume = 1.0;
  int spanned = 0;
  for (int c = 0; c < 3; ++c) {
    g.lo[c] = n > 0 ? static_cast<double>(mn[c]) : 0.0;
    ext[c] = n > 0 ? static_cast<double>(mx[c]) - g.lo[c] : 0.0;
    if (ext[c] > 0.0) {
      ++spanned;
      volume *= ext[c];
    }
  }
  const double cells_wanted = n > 2 ? static_cast<double>(n) / 2.0 : 1.0;
  double h = spanned > 0 ? pow(volume / cells_wanted, 1.0 / spanned) : 1.0;
  if (!(h > 0.0) || !(h < 1e300)) h = fmax(fmax(ext[0], ext[1]), fmax(ext[2], 1e-300));
  detail::fit_cells(g, ext, h, cap);
  return g;
}

/// The most cells refine_grid gives a sample of n nodes, per node.
inline constexpr int kMaxCellsPerNode = 8;

/// g = make_grid(mn, mx, n) made finer when its `occupied` non-empty cells hold more than 4 nodes each on
/// average (a surface fills few cells of its box: the nodes per occupied cell grow as n^(1/3)): the edge
/// shrunk as for a surface, whose nodes per cell go as h^2, to about two nodes per occupied cell, at most
/// kMaxCellsPerNode * n cells. The same grid otherwise. Any grid gives the same lists; a finer one offers
/// each query fewer candidates.
SURROGATE_GRID_NEAREST Grid refine_grid(const Grid& g, const float (&mx)[3], long long n, long long occupied) {
  if (n < 1 || occupied < 1 || n <= 4 * occupied) return g;
  double ext[3];
  for (int c = 0; c < 3; ++c) ext[c] = static_cast<double>(mx[c]) - g.lo[c];
  const double shrink = fmin(sqrt(static_cast<double>(n) / (2.0 * static_cast<double>(occupied))), 8.0);
  Grid r = g;
  detail::fit_cells(r, ext, g.h / shrink, kMaxCellsPerNode * n);
  return r.h < g.h ? r : g;
}

/// floor((p - lo) / h) clamped to 0 .. dims - 1 (NaN to 0).
SURROGATE_GRID_NEAREST int cell_index(double p, double lo, double h, int dims) {
  const double v = floor((p - lo) / h);
  if (!(v >= 0.0)) return 0;
  if (!(v <= static_cast<double>(dims - 1))) return dims - 1;
  return static_cast<int>(v);
}

/// The cell (among all samples' cells) of position p (3 floats) on grid g.
SURROGATE_GRID_NEAREST long long cell_of(const Grid& g, const float* p) {
  int at[3];
  for (int c = 0; c < 3; ++c) at[c] = cell_index(static_cast<double>(p[c]), g.lo[c], g.h, g.dims[c]);
  return g.base + (static_cast<long long>(at[2]) * g.dims[1] + at[1]) * g.dims[0] + at[0];
}

/// The squared distance of the search's rule.
SURROGATE_GRID_NEAREST double squared_distance(const double (&q)[3], const float* p) {
#if defined(__CUDA_ARCH__)
  const double dx = __dsub_rn(q[0], static_cast<double>(p[0])), dy = __dsub_rn(q[1], static_cast<double>(p[1])),
               dz = __dsub_rn(q[2], static_cast<double>(p[2]));
  return __dadd_rn(__dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)), __dmul_rn(dz, dz));
#else
  const double dx = q[0] - static_cast<double>(p[0]), dy = q[1] - static_cast<double>(p[1]),
               dz = q[2] - static_cast<double>(p[2]);
  const double xx = dx * dx, yy = dy * dy, zz = dz * dz;
  return (xx + yy) + zz;
#endif
}

/// The k best so far of one query, ascending by (squared distance, node): a total order, so the k best
/// do not depend on the order the candidates come in.
struct Best {
  double d[kMaxK];
  long long id[kMaxK];
  int count = 0;

  SURROGATE_GRID_NEAREST void consider(double dist, long long node, int k) {
    int j;
    if (count == k) {
      if (dist > d[k - 1] || (dist == d[k - 1] && node > id[k - 1])) return;
      j = k - 1;
    } else {
      j = count++;
    }
    while (j > 0 && (d[j - 1] > dist || (d[j - 1] == dist && id[j - 1] > node))) {
      d[j] = d[j - 1];
      id[j] = id[j - 1];
      --j;
    }
    d[j] = dist;
    id[j] = node;
  }
};

/// The k (at most the sample's nodes) nearest to q on grid g into `best`: visit(cell) offers every node of
/// that cell to best.consider. Rings of cells around q's own, until a ring leaves no unvisited cell that
/// can hold a node before the k-th best: an unvisited cell's index is past q's by more than the ring on
/// some axis, so its nodes lie beyond that cell plane; the bound is taken from q's own coordinates, less a
/// margin of 1e-9 of the magnitudes (far above the rounding of a cell index), and compared strictly.
template <class Visit>
SURROGATE_GRID_NEAREST void search(const Grid& g, const double (&q)[3], int k, Best& best, Visit&& visit) {
  int at[3], reach = 0;  // reach: the ring that covers the whole grid
  for (int c = 0; c < 3; ++c) {
    at[c] = cell_index(q[c], g.lo[c], g.h, g.dims[c]);
    const int far = at[c] > g.dims[c] - 1 - at[c] ? at[c] : g.dims[c] - 1 - at[c];
    reach = far > reach ? far : reach;
  }
  const auto cell = [&](int x, int y, int z) {
    visit(g.base + (static_cast<long long>(z) * g.dims[1] + y) * g.dims[0] + x);
  };
  for (int r = 0;; ++r) {
    const int z0 = at[2] - r > 0 ? at[2] - r : 0, z1 = at[2] + r < g.dims[2] - 1 ? at[2] + r : g.dims[2] - 1;
    const int y0 = at[1] - r > 0 ? at[1] - r : 0, y1 = at[1] + r < g.dims[1] - 1 ? at[1] + r : g.dims[1] - 1;
    const int x0 = at[0] - r > 0 ? at[0] - r : 0, x1 = at[0] + r < g.dims[0] - 1 ? at[0] + r : g.dims[0] - 1;
    for (int z = z0; z <= z1; ++z)
      for (int y = y0; y <= y1; ++y) {
        if (z == at[2] - r || z == at[2] + r || y == at[1] - r || y == at[1] + r) {
          for (int x = x0; x <= x1; ++x) cell(x, y, z);
        } else {  // inside the ring's y and z faces: only its two x faces
          if (at[0] - r >= 0) cell(at[0] - r, y, z);
          if (r > 0 && at[0] + r < g.dims[0]) cell(at[0] + r, y, z);
        }
      }
    if (r >= reach) return;
    if (best.count < k) continue;
    double bound = 1e308;
    for (int c = 0; c < 3; ++c) {
      const double slack = 1e-9 * (fabs(g.lo[c]) + fabs(q[c]) + (g.dims[c] + 1.0) * g.h);
      if (at[c] + r + 1 <= g.dims[c] - 1) bound = fmin(bound, g.lo[c] + (at[c] + r + 1) * g.h - q[c] - slack);
      if (at[c] - r - 1 >= 0) bound = fmin(bound, q[c] - (g.lo[c] + (at[c] - r) * g.h) - slack);
    }
    if (bound > 0.0 && best.d[k - 1] < bound * bound * (1.0 - 1e-12)) return;
  }
}

}  // namespace surrogate::kernels::grid_nearest
