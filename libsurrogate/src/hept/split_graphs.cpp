// SplitGraphs (split_graphs.hpp): the padded rows cut over the ranks and the geometry of the split graphs
// from distributed ranks; each layer's buckets are in split_buckets.cpp.
#include "split_graphs.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "../exchange/collectives.hpp"
#include "../exchange/sample_owners.hpp"
#include "../exchange/segment_ranks.hpp"
#include "surrogate/error.hpp"

namespace surrogate::hept {
namespace {

using detail::order_image;
using detail::RankRecord;

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

}  // namespace

void SplitGraphs::gather(const Part& part, const float* in, index_t ld_in, int width, float* rows) const {
  const auto np = static_cast<std::int64_t>(graph_.size());
  if (static_cast<std::int64_t>(part.received.size()) == np) {
    part.inputs.forward(in, ld_in, rows, width, width);
    return;
  }
  std::vector<float> got(sz(std::max<std::int64_t>(static_cast<std::int64_t>(part.received.size()), 1)) * sz(width));
  part.inputs.forward(in, ld_in, got.data(), width, width);
  std::fill_n(rows, np * width, 0.0f);
  for (std::size_t t = 0; t < part.received.size(); ++t)
    std::copy_n(got.data() + t * sz(width), width, rows + part.received[t] * width);
}

int SplitGraphs::owner(std::int64_t position) const {
  return static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end(), position) - bounds_.begin()) - 1;
}

void SplitGraphs::rebind(const Comm& comm) {
  outputs_.rebind(comm);
  p32_.inputs.rebind(comm);
  p64_.inputs.rebind(comm);
}

SplitGraphs::SplitGraphs(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry,
                         const Config& cfg, const std::vector<float>& regions, Traffic* traffic)
    : cfg_(cfg), traffic_(traffic) {
  const int P = comm.size(), me = comm.rank(), cd = cfg.coords_dim, H = cfg.num_heads, rows = cfg.n_hashes * H;
  const std::int64_t bs = cfg.block_size;
  const bool src = cfg.layout == Config::Layout::src;
  const std::vector<index_t>& sizes = layout.sample_sizes();
  const auto G = static_cast<std::int64_t>(sizes.size());
  std::vector<std::int64_t> first_point(sz(G) + 1, 0);
  graph_first_.assign(sz(G) + 1, 0);
  for (std::int64_t g = 0; g < G; ++g) {
    first_point[sz(g) + 1] = first_point[sz(g)] + sizes[sz(g)];
    graph_first_[sz(g) + 1] = graph_first_[sz(g)] + (sizes[sz(g)] + bs - 1) / bs * bs;
  }
  const std::int64_t total = graph_first_.back();
  for (int r = 0; r <= P; ++r) bounds_.push_back(total * r / P);
  const std::int64_t tb = bounds_[sz(me)], te = bounds_[sz(me) + 1], np = te - tb;
  std::vector<RowRange> wanted;  // the originals of this rank's rows, as sample-major point numbers
  std::vector<std::int64_t> originals;  // local rows of the originals
  for (std::int64_t pos = tb; pos < te; ++pos) {
    const std::int64_t g = std::upper_bound(graph_first_.begin(), graph_first_.end(), pos) - graph_first_.begin() - 1;
    const std::int64_t p = pos - graph_first_[sz(g)];
    graph_.push_back(g);
    position_.push_back(p);
    if (p >= sizes[sz(g)]) continue;
    const std::int64_t point = first_point[sz(g)] + p;
    if (!wanted.empty() && wanted.back().end == point) ++wanted.back().end;
    else wanted.push_back({point, point + 1});
    originals.push_back(pos - tb);
  }
  const auto n_orig = static_cast<std::int64_t>(originals.size());

  // 1. The working row of every original: each sample ordered by global id on its owner (SampleOwners),
  // then (rank, row) pairs moved from the owners to the padded ranges.
  detail::SampleOwners owners = detail::SampleOwners::build(comm, layout, geometry.global_ids);
  const index_t n_work = layout.local_points();
  std::vector<double> self(sz(std::max<index_t>(n_work, 1)) * 2), at_owner(sz(std::max<index_t>(owners.rows(), 1)) * 2),
      source(sz(std::max<std::int64_t>(n_orig, 1)) * 2);
  for (index_t i = 0; i < n_work; ++i) {
    self[sz(2 * i)] = me;
    self[sz(2 * i + 1)] = static_cast<double>(i);
  }
  owners.rows_plan().forward(self.data(), 2, at_owner.data());
  std::vector<RowRange> held;
  std::vector<std::int64_t> held_first;
  for (const auto& o : owners.owned()) {
    held.push_back({first_point[sz(o.sample)], first_point[sz(o.sample)] + (o.end - o.begin)});
    held_first.push_back(o.begin);
  }
  ExchangePlan::from_ranges(comm, owners.rows(), held, held_first, wanted).forward(at_owner.data(), 2, source.data());
  std::vector<int> orig_rank(sz(n_orig));
  std::vector<std::int64_t> orig_row(sz(n_orig));
  for (std::int64_t k = 0; k < n_orig; ++k) {
    orig_rank[sz(k)] = static_cast<int>(source[sz(2 * k)]);
    orig_row[sz(k)] = static_cast<std::int64_t>(source[sz(2 * k + 1)]);
  }
  outputs_ = ExchangePlan::from_requests(comm, n_work, orig_rank, orig_row, {}, {});
  outputs_.count_into(traffic);
  std::vector<float> coords(sz(std::max<std::int64_t>(n_orig, 1)) * sz(cd));
  outputs_.forward(geometry.positions, cd, coords.data(), cd, cd);

  // 2. The eta and phi ranks of every original within its graph (ties by position: the stable order).
  std::vector<RankRecord> records;
  for (int axis = 0; axis < 2; ++axis)
    for (std::int64_t k = 0; k < n_orig; ++k) {
      const std::int64_t j = originals[sz(k)];
      records.push_back({static_cast<std::uint64_t>(graph_[sz(j)] * 2 + axis),
                         order_image(static_cast<double>(coords[sz(k * cd + axis)])), position_[sz(j)]});
    }
  const std::vector<std::int64_t> axis_rank = detail::ranks_in_segments(comm, records, static_cast<std::uint64_t>(2 * G));

  // 3. Per arithmetic: bins, bit widths over the batch, codes, the duplicates' sources and codes.
  auto build = [&]<class T>(Part& part, T) {
    Geometry& g = part.geometry;
    std::vector<std::int64_t> eta(sz(rows * n_orig)), phi(eta.size()), code(eta.size());
    if (src) {  // the ranks run over the padded graph, the zero pads (coordinates +inf) last in order
      g.region_eta.assign(sz(rows * np), 0);
      g.region_phi.assign(sz(rows * np), 0);
    }
    for (int axis = 0; axis < 2; ++axis)
      for (int r = 0; r < rows; ++r) {
        const float R = regions[sz(((r / H) * 2 + axis) * H + r % H)];
        Geometry::RowsArray& region = axis == 0 ? g.region_eta : g.region_phi;
        for (std::int64_t j = 0, k = 0; j < np; ++j) {
          const std::int64_t gj = graph_[sz(j)], mg = src ? graph_first_[sz(gj) + 1] - graph_first_[sz(gj)] : sizes[sz(gj)];
          const std::int64_t bin = quantile_bin<T>(mg, R);
          const bool original = k < n_orig && originals[sz(k)] == j;
          const std::int64_t rank = original ? axis_rank[sz(axis * n_orig + k)] : position_[sz(j)];
          if (original) (axis == 0 ? eta : phi)[sz(r * n_orig + k++)] = rank / bin + 1;
          if (src) region[sz(r * np + j)] = rank / bin + 1;
        }
      }
    g.sizes = {n_orig};
    g.padded_sizes = {np};
    if (src) {  // no codes, no duplicates: the originals receive their rows, the pads are zero rows
      g.pad_seq.assign(sz(np), -1);
      g.unpad.assign(sz(np), 0);
      for (const std::int64_t j : originals) {
        g.pad_seq[sz(j)] = j;
        g.unpad[sz(j)] = 1;
      }
      part.received = originals;
      part.inputs = ExchangePlan::from_requests(comm, n_work, orig_rank, orig_row, {}, {});
      part.inputs.count_into(traffic);
      part.coords.assign(sz(std::max<std::int64_t>(np, 1)) * sz(cd), 0.0f);
      gather(part, geometry.positions, cd, cd, part.coords.data());
      return;
    }
    auto batch_bits = [&](const std::vector<std::int64_t>& v) {
      std::vector<std::int64_t> m(sz(rows), 0);
      for (int r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < n_orig; ++k) m[sz(r)] = std::max(m[sz(r)], v[sz(r * n_orig + k)]);
      comm.allreduce(std::span<std::int64_t>(m), ReduceOp::max);
      for (auto& b : m) b = bit_width(b);
      return m;
    };
    g.bits_eta = batch_bits(eta);
    for (int r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < n_orig; ++k)
        code[sz(r * n_orig + k)] = (phi[sz(r * n_orig + k)] << g.bits_eta[sz(r)]) | eta[sz(r * n_orig + k)];
    g.bits_code1 = batch_bits(code);
    for (int r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < n_orig; ++k)
        code[sz(r * n_orig + k)] |= graph_[sz(originals[sz(k)])] << g.bits_code1[sz(r)];
    // Padding: the originals at ranks n - bs + t (t < d) of the stable order of row 0's codes in their graph
    // send their working row and codes to the rank of duplicate t (padded position n + t).
    std::vector<RankRecord> by_code;
    for (std::int64_t k = 0; k < n_orig; ++k)
      by_code.push_back({static_cast<std::uint64_t>(graph_[sz(originals[sz(k)])]), order_image(code[sz(k)]),
                         position_[sz(originals[sz(k)])]});
    const std::vector<std::int64_t> code_rank = detail::ranks_in_segments(comm, by_code, static_cast<std::uint64_t>(G));
    const int width = 3 + rows;
    std::vector<std::int64_t> out;
    std::vector<int> dest;
    for (std::int64_t k = 0; k < n_orig; ++k) {
      const std::int64_t gk = graph_[sz(originals[sz(k)])], ng = sizes[sz(gk)];
      const std::int64_t t = code_rank[sz(k)] - (ng - bs), d = graph_first_[sz(gk) + 1] - graph_first_[sz(gk)] - ng;
      if (t < 0 || t >= d) continue;
      const std::int64_t pos = graph_first_[sz(gk)] + ng + t;
      out.insert(out.end(), {pos, orig_rank[sz(k)], orig_row[sz(k)]});
      for (int r = 0; r < rows; ++r) out.push_back(code[sz(r * n_orig + k)]);
      dest.push_back(owner(pos));
    }
    detail::PushedRecords pushed;
    detail::push_records(comm, out, width, dest, pushed);
    const std::vector<std::int64_t>& dups = pushed.received;
    const std::vector<int>& from = pushed.source;
    std::vector<int> row_rank(sz(np), -1);
    std::vector<std::int64_t> row_src(sz(np), -1);
    g.padded_codes.assign(sz(rows * np), 0);
    g.unpad.assign(sz(np), 0);
    for (std::int64_t k = 0; k < n_orig; ++k) {
      const std::int64_t j = originals[sz(k)];
      row_rank[sz(j)] = orig_rank[sz(k)];
      row_src[sz(j)] = orig_row[sz(k)];
      g.unpad[sz(j)] = 1;
      for (int r = 0; r < rows; ++r) g.padded_codes[sz(r * np + j)] = code[sz(r * n_orig + k)];
    }
    for (std::size_t i = 0; i < from.size(); ++i) {
      const std::int64_t* rec = dups.data() + i * sz(width);
      const std::int64_t j = rec[0] - tb;
      row_rank[sz(j)] = static_cast<int>(rec[1]);
      row_src[sz(j)] = rec[2];
      for (int r = 0; r < rows; ++r) g.padded_codes[sz(r * np + j)] = rec[3 + r];
    }
    std::string missing;
    for (std::int64_t j = 0; j < np && missing.empty(); ++j)
      if (row_rank[sz(j)] < 0)
        missing = "hept: rank " + std::to_string(me) + " received no source for padded row " + std::to_string(tb + j);
    comm.agree_or_throw(missing.empty() ? Status{} : Status{ErrorCode::internal, missing});
    part.received.resize(sz(np));
    std::iota(part.received.begin(), part.received.end(), std::int64_t{0});
    part.inputs = ExchangePlan::from_requests(comm, n_work, row_rank, row_src, {}, {});
    part.inputs.count_into(traffic);
    part.coords.assign(sz(std::max<std::int64_t>(np, 1)) * sz(cd), 0.0f);
    part.inputs.forward(geometry.positions, cd, part.coords.data(), cd, cd);
    g.pad_seq.resize(sz(np));
    std::iota(g.pad_seq.begin(), g.pad_seq.end(), std::int64_t{0});
  };
  build(p32_, 0.0f);
  build(p64_, 0.0);
  group_regions(comm, regions);
}

void SplitGraphs::group_regions(const Comm& comm, const std::vector<float>& regions) {
  const int H = cfg_.num_heads, C = cfg_.n_hashes, rows = C * H;
  const bool src = cfg_.layout == Config::Layout::src;
  const auto np = static_cast<std::int64_t>(graph_.size());
  // src: the region code phi * (ceil(R_eta) + 1) + eta orders the regions as (phi, eta). The forward
  // computes that key in floating point for any R; here in int64, a factor above 2^31 is clamped to
  // 2^31 or one more than the largest eta of any rank (the same order, no overflow for any R), and the
  // product checked.
  std::int64_t eta_bound = 0;
  if (src) {
    for (const Part* part : {&p32_, &p64_})
      for (std::size_t i = 0; i < sz(rows * np); ++i) eta_bound = std::max(eta_bound, part->geometry.region_eta[i] + 1);
    eta_bound = comm.allreduce<std::int64_t>(eta_bound, ReduceOp::max);
  }
  auto region_factor = [&](int r) -> std::int64_t {
    const double f = std::ceil(static_cast<double>(regions[sz((r / H) * 2 * H + r % H)])) + 1.0;
    const std::int64_t cap = std::max(eta_bound, std::int64_t{1} << 31);
    return f < static_cast<double>(cap) ? static_cast<std::int64_t>(f) : cap;
  };
  std::vector<std::int64_t> count(sz(2 * C), 0);  // per part and table: the number of regions
  bool overflow = false;
  for (int p = 0; p < 2; ++p) {
    Part& part = p == 0 ? p32_ : p64_;
    const Geometry& g = part.geometry;
    part.groups.resize(sz(rows * np));
    for (int r = 0; r < rows; ++r) {
      const std::int64_t factor = src ? region_factor(r) : 0;
      for (std::int64_t j = 0; j < np; ++j) {
        const std::size_t i = sz(r * np + j);
        std::int64_t code = 0;
        if (src)
          overflow |= __builtin_mul_overflow(g.region_phi[i], factor, &code) ||
                      __builtin_add_overflow(code, g.region_eta[i], &code);
        else
          code = g.padded_codes[i] & ((std::int64_t{1} << g.bits_code1[sz(r)]) - 1);  // less the graph
        part.groups[i] = code;
        count[sz(p * C + r / H)] = std::max(count[sz(p * C + r / H)], code + 1);
      }
    }
  }
  collectively(comm, [&] {
    if (overflow)
      throw Error(ErrorCode::unsupported, "hept: the region codes of a graph with more than 3e9 points overflow "
                                          "int64 on the split over " + std::to_string(comm.size()) + " ranks");
  });
  comm.allreduce(std::span<std::int64_t>(count), ReduceOp::max);
  const std::int64_t per_rank = 16 * comm.size();
  for (int p = 0; p < 2; ++p) {
    Part& part = p == 0 ? p32_ : p64_;
    part.group_count.resize(sz(C));
    for (int c = 0; c < C; ++c) {
      const std::int64_t n = count[sz(p * C + c)], per_group = std::max<std::int64_t>(1, (n + per_rank - 1) / per_rank);
      part.group_count[sz(c)] = (n + per_group - 1) / per_group;
      for (std::int64_t i = c * H * np; i < (c + 1) * H * np; ++i) part.groups[sz(i)] /= per_group;
    }
  }
}

}  // namespace surrogate::hept
