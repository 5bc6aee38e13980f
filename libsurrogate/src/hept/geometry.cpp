// HEPT's geometry-only steps (share/docs/hept.md, "Regions and padding"): quantile bins of eta and phi
// per graph, bit widths, region codes (AND-construction) and padding by duplication, with stable sorts.
#include <algorithm>
#include <cmath>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/kernels/stable_key_sort.hpp"

namespace surrogate::hept {
namespace {

/// Positions 0..n-1 in the stable order of keys[0..n-1] (ties by position).
template <class T>
std::vector<std::int64_t> stable_order(const T* keys, std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  kernels::StableKeySortWork<T> work;
  kernels::stable_key_sort(keys, n, 0, order.data(), work);
  return order;
}

}  // namespace

template <class T>
std::int64_t quantile_bin(std::int64_t n, float regions) {
  const T bin = std::ceil(static_cast<T>(n) * (T(1) / static_cast<T>(regions)));
  if (!(bin >= T(1)) || !std::isfinite(bin))
    throw Error(ErrorCode::weights, "hept: 'regions' gives a quantile bin size " + std::to_string(double(bin)) +
                                        " (regions must be positive and finite)");
  return static_cast<std::int64_t>(bin);
}
template std::int64_t quantile_bin<float>(std::int64_t, float);
template std::int64_t quantile_bin<double>(std::int64_t, float);

std::int64_t bit_width(std::int64_t max) {
  return static_cast<std::int64_t>(std::ceil(std::log2(static_cast<float>(max + 1))));
}

template <class T>
void quantile_bins(const Config& cfg, const std::vector<float>& regions, const float* coords,
                   const std::vector<std::int64_t>& sizes, Geometry& g) {
  const int rows = cfg.n_hashes * cfg.num_heads, H = cfg.num_heads, cd = cfg.coords_dim;
  // src: the ranks are taken over the padded graph, the pads' coordinates +inf (they rank last, in order).
  const bool src = cfg.layout == Config::Layout::src;
  const std::int64_t bs = cfg.block_size;
  auto ranked = [&](std::int64_t ng) { return src ? (ng + bs - 1) / bs * bs : ng; };
  std::int64_t total = 0;
  for (const std::int64_t s : sizes) total += ranked(s);
  g.sizes = sizes;
  g.region_eta.resize(static_cast<std::size_t>(rows * total));  // every element written below, in parallel
  g.region_phi.resize(static_cast<std::size_t>(rows * total));
  g.bin_eta.assign(sizes.size() * static_cast<std::size_t>(rows), 0.0);
  g.bin_phi.assign(sizes.size() * static_cast<std::size_t>(rows), 0.0);
  std::int64_t first = 0, first_ranked = 0;
  for (std::size_t graph = 0; graph < sizes.size(); ++graph) {
    const std::int64_t ng = sizes[graph], mg = ranked(ng);
    const float* c = coords + first * cd;
    for (int axis = 0; axis < 2; ++axis) {
      std::vector<float> key(static_cast<std::size_t>(ng));
      for (std::int64_t i = 0; i < ng; ++i) key[static_cast<std::size_t>(i)] = c[i * cd + axis];
      const auto order = stable_order(key.data(), ng);
      std::vector<std::int64_t> rank(static_cast<std::size_t>(mg));
      for (std::int64_t p = 0; p < ng; ++p) rank[static_cast<std::size_t>(order[static_cast<std::size_t>(p)])] = p;
      for (std::int64_t p = ng; p < mg; ++p) rank[static_cast<std::size_t>(p)] = p;
      std::vector<std::int64_t> bin(static_cast<std::size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        // R[axis, c*H + h] = regions[c, axis, h]; bin = ceil(n * fl(1 / R)) in the run's precision.
        const float R = regions[static_cast<std::size_t>(((r / H) * 2 + axis) * H + r % H)];
        bin[static_cast<std::size_t>(r)] = quantile_bin<T>(mg, R);
        (axis == 0 ? g.bin_eta : g.bin_phi)[graph * static_cast<std::size_t>(rows) + static_cast<std::size_t>(r)] =
            double(bin[static_cast<std::size_t>(r)]);
      }
      std::int64_t* out = (axis == 0 ? g.region_eta : g.region_phi).data() + first_ranked;
      const std::int64_t* rk = rank.data();
      // rank / b in double is the integer quotient: both are below 2^31 here, far inside 2^53.
      const bool exact_in_double = mg < (std::int64_t{1} << 31);
#pragma omp parallel for schedule(static)
      for (int r = 0; r < rows; ++r) {
        const std::int64_t b = bin[static_cast<std::size_t>(r)];
        std::int64_t* o = out + r * total;
        if (exact_in_double) {
          const double db = static_cast<double>(b);
          for (std::int64_t i = 0; i < mg; ++i)
            o[i] = static_cast<std::int64_t>(static_cast<double>(rk[i]) / db) + 1;
        } else {
          for (std::int64_t i = 0; i < mg; ++i) o[i] = rk[i] / b + 1;
        }
      }
    }
    first += ng;
    first_ranked += mg;
  }
}

void finish_geometry(const Config& cfg, const std::vector<std::int64_t>& graph_ids, Geometry& g,
                     const std::function<void(std::vector<std::int64_t>&)>& reduce_max) {
  const int rows = cfg.n_hashes * cfg.num_heads;
  const std::int64_t n = static_cast<std::int64_t>(g.region_eta.size()) / rows, bs = cfg.block_size;
  if (cfg.layout == Config::Layout::src) {
    // One graph: its points in order, then zero pads (-1) up to a multiple of bs; no codes.
    g.padded_sizes.assign(1, n);
    g.pad_seq.clear();
    g.unpad.clear();
    for (std::int64_t i = 0; i < n; ++i) {
      const bool real = i < g.sizes.at(0);
      g.pad_seq.push_back(real ? i : -1);
      g.unpad.push_back(real ? 1 : 0);
    }
    (void)graph_ids, (void)reduce_max;
    return;
  }
  // The per-row passes below are independent across the rows (one row per thread, the same bits).
  auto batch_max = [&](const Geometry::RowsArray& v) {
    std::vector<std::int64_t> m(static_cast<std::size_t>(rows), 0);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
      const std::int64_t* row = v.data() + r * n;
      std::int64_t best = 0;
      for (std::int64_t i = 0; i < n; ++i) best = std::max(best, row[i]);
      m[static_cast<std::size_t>(r)] = best;
    }
    if (reduce_max) reduce_max(m);
    return m;
  };
  // Bit widths over the whole batch (every rank's graphs): of the eta bins, then of code1 (held in codes).
  g.bits_eta = batch_max(g.region_eta);
  for (auto& b : g.bits_eta) b = bit_width(b);
  g.codes.resize(static_cast<std::size_t>(rows * n));
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const std::int64_t shift = g.bits_eta[static_cast<std::size_t>(r)];
    const std::int64_t *eta = g.region_eta.data() + r * n, *phi = g.region_phi.data() + r * n;
    std::int64_t* code1 = g.codes.data() + r * n;
    for (std::int64_t i = 0; i < n; ++i) code1[i] = (phi[i] << shift) | eta[i];
  }
  g.bits_code1 = batch_max(g.codes);
  for (auto& b : g.bits_code1) b = bit_width(b);
  std::int64_t first = 0;
  for (std::size_t graph = 0; graph < g.sizes.size(); ++graph) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
      const std::int64_t tag = graph_ids[graph] << g.bits_code1[static_cast<std::size_t>(r)];
      std::int64_t* code = g.codes.data() + r * n + first;
      for (std::int64_t i = 0; i < g.sizes[graph]; ++i) code[i] |= tag;
    }
    first += g.sizes[graph];
  }
  // Padding: each graph to a multiple of bs, its hits in input order, then copies of the hits at sorted
  // positions n_g - bs + t (t < d_g) of the stable order of row 0's codes within the graph.
  g.padded_sizes.clear();
  g.pad_sort_order.assign(static_cast<std::size_t>(n), 0);
  g.pad_seq.clear();
  g.unpad.clear();
  first = 0;
  for (std::size_t graph = 0; graph < g.sizes.size(); ++graph) {
    const std::int64_t ng = g.sizes[graph], pg = (ng + bs - 1) / bs * bs;
    if (ng < bs)
      throw Error(ErrorCode::input, "hept: graph " + std::to_string(graph_ids[graph]) + " has " + std::to_string(ng) +
                                        " points, fewer than the block size " + std::to_string(bs) +
                                        " (the official code then pads it with points of other graphs)");
    const auto order = stable_order(g.codes.data() + first, ng);
    for (std::int64_t p = 0; p < ng; ++p)
      g.pad_sort_order[static_cast<std::size_t>(first + p)] = first + order[static_cast<std::size_t>(p)];
    for (std::int64_t i = 0; i < ng; ++i) {
      g.pad_seq.push_back(first + i);
      g.unpad.push_back(1);
    }
    for (std::int64_t t = 0; t < pg - ng; ++t) {
      g.pad_seq.push_back(first + order[static_cast<std::size_t>(ng - bs + t)]);
      g.unpad.push_back(0);
    }
    g.padded_sizes.push_back(pg);
    first += ng;
  }
  const std::int64_t np = static_cast<std::int64_t>(g.pad_seq.size());
  g.padded_codes.resize(static_cast<std::size_t>(rows * np));
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const std::int64_t* code = g.codes.data() + r * n;
    std::int64_t* padded = g.padded_codes.data() + r * np;
    for (std::int64_t i = 0; i < np; ++i) padded[i] = code[g.pad_seq[static_cast<std::size_t>(i)]];
  }
}

template void quantile_bins<float>(const Config&, const std::vector<float>&, const float*,
                                   const std::vector<std::int64_t>&, Geometry&);
template void quantile_bins<double>(const Config&, const std::vector<float>&, const float*,
                                    const std::vector<std::int64_t>&, Geometry&);

}  // namespace surrogate::hept
