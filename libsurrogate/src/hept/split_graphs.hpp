// HEPT with graphs split over the ranks (share/docs/hept.md, "Plan and ranks"): every graph's padded rows
// cut into contiguous rank ranges, the geometry from distributed ranks (sample sorts), and each hash
// table's bucket attention on the rank whose piece of the sorted queries holds the bucket's start.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "../exchange/collectives.hpp"
#include "../exchange/segment_ranks.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/model.hpp"

namespace surrogate::hept {

class SplitGraphs {
 public:
  /// Collective. The padded order (graph by graph: its points by global id, then its duplicates, or the
  /// src layout's zero pads) is cut into P contiguous ranges of about the same length; this rank's rows
  /// are its range's padded rows.
  SplitGraphs(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const Config& cfg,
              const std::vector<float>& regions, Traffic* traffic);

  /// Rows of `width` values from the working rows to this rank's padded rows (duplicates receive their
  /// originals' rows; the src layout's pads are zero). Collective.
  void inputs(bool fp64, const float* in, index_t ld_in, int width, float* rows) const {
    gather(part(fp64), in, ld_in, width, rows);
  }
  /// The working rows -> this rank's original rows (in padded order); backward returns the outputs.
  const ExchangePlan& outputs() const { return outputs_; }
  /// Geometry of this rank's padded rows (pad_seq the identity, unpad, padded_codes) and their coordinates.
  const Geometry& geometry_of(bool fp64) const { return part(fp64).geometry; }
  const std::vector<float>& coords(bool fp64) const { return part(fp64).coords; }
  void rebind(const Comm& comm);

  /// The bucket attention of hash table `table` (Network::BucketStage): keys [h][rows], q_hat and k_hat
  /// [h][rows][hash_dim], v [h][rows][h_dim] of this rank's rows; writes num [h][rows][h_dim], den
  /// [h][rows]. Collective.
  template <class T>
  void attend(const Comm& comm, int table, const T* keys_q, const T* keys_k, const T* qh, const T* kh, const T* vh, T* num,
              T* den, int threads) const;

  /// The moves of attend without its kernel (the CUDA forward's bucket stage): `queries` and `keys` take
  /// the rows (h * rows + j, as attend's arrays) of this rank's buckets, slot by slot in sorted order, into
  /// `slots` target rows, buckets of block_size; queries.backward returns each query slot's sums to its
  /// row. Collective.
  struct BucketMoves {
    ExchangePlan queries, keys;
    std::int64_t slots = 0;
  };
  template <class T>
  BucketMoves bucket_moves(const Comm& comm, int table, const T* keys_q, const T* keys_k, int threads) const;

 private:
  struct Part {
    Geometry geometry;
    ExchangePlan inputs;                  // working rows -> the rows `received`
    std::vector<std::int64_t> received;  // local rows that receive inputs (all but the src layout's pads)
    std::vector<float> coords;
    // The region of every head row r (= table * heads + head) and local row j at [r * rows + j], coarsened
    // to about 16 groups per rank, and each table's number of groups: route's sort cuts between them.
    std::vector<std::int64_t> groups, group_count;
  };
  void gather(const Part& part, const float* in, index_t ld_in, int width, float* rows) const;
  /// This rank's buckets (head, graph, bucket number) and, for every slot of every bucket (row bucket *
  /// block_size + slot), the rank and key (h * rows + row) of its query and its key.
  struct Routes {
    std::vector<std::array<std::int64_t, 3>> buckets;
    std::vector<int> rank[2];
    std::vector<std::int64_t> key[2];
  };
  /// Fills work_.routes.
  template <class T>
  void route(const Comm& comm, int table, const T* keys_q, const T* keys_k, int threads) const;
  /// Fills the parts' groups (collective): the region codes, which the keys' shift code * Delta follows
  /// (src: phi bin * factor + eta bin), of every head row.
  void group_regions(const Comm& comm, const std::vector<float>& regions);
  /// The buffers of route and attend, kept between calls (a plan serves one forward at a time).
  struct Work {
    std::vector<detail::SortElement> local;
    std::vector<std::int64_t> group;  // of each element of `local`: its region, coarsened
    detail::SortedPiece piece;
    std::vector<std::int64_t> records;
    std::vector<int> dest;
    detail::PushedRecords pushed;
    Routes routes;
    std::vector<float> rows32[5];
    std::vector<double> rows64[5];
  };
  mutable Work work_;
  const Part& part(bool fp64) const { return fp64 ? p64_ : p32_; }
  int owner(std::int64_t position) const;

  Config cfg_;
  std::vector<std::int64_t> bounds_;       // rank r holds padded positions [bounds_[r], bounds_[r+1])
  std::vector<std::int64_t> graph_first_;  // first padded position of every graph, and the total
  std::vector<std::int64_t> graph_, position_;  // of each local row: its graph, its position in the graph
  ExchangePlan outputs_;
  Part p32_, p64_;
  Traffic* traffic_ = nullptr;  // the plan's total, also of each layer's bucket moves
};

}  // namespace surrogate::hept
