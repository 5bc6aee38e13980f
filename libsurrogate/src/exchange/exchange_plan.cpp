// ExchangePlan: the builders and the host moves (exchange.hpp); device moves in exchange_device.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "../device_support.hpp"
#include "../prefetch.hpp"
#include "collectives.hpp"
#include "move_timer.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"

namespace surrogate {

namespace {

/// Copies `bytes` from src(i) to dst(i) for i < n. Rows listed by index are random accesses: each is asked
/// of the caches kPrefetchAhead rows before its copy, on the sides marked (a read, a write), so that the
/// copies overlap their misses instead of waiting on each (share/docs/adding-a-family.md, section 5).
/// Copies of 4 MiB and more whose destinations are distinct rows are split into chunks of about 256 KiB
/// over the OpenMP threads: one core does not reach the memory's bandwidth, and a serial copy of the whole
/// band caps a many-core forward. (A backward move may write a source row from several targets: in order,
/// on one thread, so that the last one wins whole, as before.)
template <bool PrefetchSrc, bool PrefetchDst, class Src, class Dst>
void copy_rows(std::size_t n, std::size_t bytes, Src src, Dst dst, bool distinct_destinations) {
  constexpr std::size_t kPrefetchAhead = 16, kParallelBytes = std::size_t{1} << 22, kChunkBytes = std::size_t{1} << 18;
  const auto copy = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      if (i + kPrefetchAhead < end) {
        if constexpr (PrefetchSrc) detail::prefetch_bytes(src(i + kPrefetchAhead), bytes);
        if constexpr (PrefetchDst) detail::prefetch_bytes<1>(dst(i + kPrefetchAhead), bytes);
      }
      std::memcpy(dst(i), src(i), bytes);
    }
  };
  if (!distinct_destinations || n * bytes < kParallelBytes) return copy(0, n);
  const std::size_t rows = std::max<std::size_t>(1, kChunkBytes / std::max<std::size_t>(bytes, 1));
  const auto chunks = static_cast<std::int64_t>((n + rows - 1) / rows);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * rows;
    copy(begin, std::min(n, begin + rows));
  }
}

}  // namespace

namespace detail {

std::vector<std::size_t> exclusive_offsets(std::span<const std::size_t> counts) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

std::vector<std::size_t> exchange_counts(const Comm& comm, std::span<const std::size_t> send_counts) {
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<std::uint64_t> send(send_counts.begin(), send_counts.end()), recv(p);
  std::vector<std::size_t> bytes(p, sizeof(std::uint64_t)), off(p);
  for (std::size_t r = 0; r < p; ++r) off[r] = r * sizeof(std::uint64_t);
  comm.alltoallv(send.data(), bytes, off, recv.data(), bytes, off);
  return {recv.begin(), recv.end()};
}

void alltoallv_elements(const Comm& comm, const void* send, std::span<const std::size_t> send_counts, void* recv,
                        std::span<const std::size_t> recv_counts, std::size_t element_bytes) {
  const std::size_t p = send_counts.size();
  std::vector<std::size_t> sb(p), so(p), rb(p), ro(p);
  std::size_t s = 0, r = 0;
  for (std::size_t i = 0; i < p; ++i) {
    sb[i] = send_counts[i] * element_bytes;
    so[i] = s;
    s += sb[i];
    rb[i] = recv_counts[i] * element_bytes;
    ro[i] = r;
    r += rb[i];
  }
  // Never hand a null pointer to MPI, even for empty messages.
  static char dummy_send = 0;
  static char dummy_recv = 0;
  comm.alltoallv(s ? send : &dummy_send, sb, so, r ? recv : &dummy_recv, rb, ro);
}

void push_records(const Comm& comm, std::span<const std::int64_t> records, int width, std::span<const int> dest,
                  PushedRecords& out) {
  const auto P = static_cast<std::size_t>(comm.size()), w = static_cast<std::size_t>(width);
  std::vector<std::size_t> counts(P, 0);
  for (const int q : dest) ++counts[static_cast<std::size_t>(q)];
  std::vector<std::size_t> at = exclusive_offsets(counts);
  out.sent.resize(records.size());
  for (std::size_t i = 0; i < dest.size(); ++i)
    std::copy_n(records.begin() + static_cast<std::ptrdiff_t>(i * w), w,
                out.sent.begin() + static_cast<std::ptrdiff_t>(at[static_cast<std::size_t>(dest[i])]++ * w));
  const std::vector<std::size_t> recv_counts = exchange_counts(comm, counts);
  std::size_t total = 0;
  for (const std::size_t c : recv_counts) total += c;
  out.received.resize(total * w);
  alltoallv_elements(comm, out.sent.data(), counts, out.received.data(), recv_counts, w * sizeof(std::int64_t));
  out.source.clear();
  for (std::size_t r = 0; r < P; ++r) out.source.insert(out.source.end(), recv_counts[r], static_cast<int>(r));
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------------
// Builders

ExchangePlan ExchangePlan::from_requests(const Comm& comm, std::int64_t source_rows, std::span<const int> source_rank,
                                         std::span<const std::int64_t> source_key, std::span<const std::int64_t> key_to_row,
                                         std::span<const std::int64_t> copy_from) {
  const int p = comm.size();
  const auto up = static_cast<std::size_t>(p);
  ExchangePlan plan;
  plan.comm_ = &comm;
  plan.source_rows_ = source_rows;
  plan.target_rows_ = static_cast<std::int64_t>(source_rank.size());
  std::vector<std::int64_t> keys;
  collectively(comm, [&] {
    if (source_key.size() != source_rank.size() || (!copy_from.empty() && copy_from.size() != source_rank.size()))
      throw Error(ErrorCode::internal, "exchange plan: request lists of different lengths");
    plan.recv_counts_.assign(up, 0);
    for (std::size_t t = 0; t < source_rank.size(); ++t) {
      if (source_rank[t] >= p) throw Error(ErrorCode::internal, "exchange plan: source rank out of range");
      if (source_rank[t] >= 0) ++plan.recv_counts_[static_cast<std::size_t>(source_rank[t])];
      else if (copy_from.empty() || copy_from[t] < 0 || copy_from[t] >= plan.target_rows_)
        throw Error(ErrorCode::internal, "exchange plan: target row " + std::to_string(t) + " has neither a source nor a copy");
      else
        plan.copies_.insert(plan.copies_.end(), {static_cast<std::int64_t>(t), copy_from[t]});
    }
    plan.recv_offsets_ = detail::exclusive_offsets(plan.recv_counts_);
    plan.recv_rows_ = std::vector<std::int64_t>(plan.recv_offsets_.back());
    keys = std::vector<std::int64_t>(plan.recv_offsets_.back());
    std::vector<std::size_t> cursor(plan.recv_offsets_.begin(), plan.recv_offsets_.end() - 1);
    for (std::size_t t = 0; t < source_rank.size(); ++t) {
      if (source_rank[t] < 0) continue;
      const std::size_t k = cursor[static_cast<std::size_t>(source_rank[t])]++;
      plan.recv_rows_[k] = static_cast<std::int64_t>(t);
      keys[k] = source_key[t];
    }
  });
  plan.send_counts_ = detail::exchange_counts(comm, plan.recv_counts_);
  plan.send_offsets_ = detail::exclusive_offsets(plan.send_counts_);
  plan.send_rows_.resize(plan.send_offsets_.back());
  detail::alltoallv_elements(comm, keys.data(), plan.recv_counts_, plan.send_rows_.data(), plan.send_counts_,
                             sizeof(std::int64_t));
  collectively(comm, [&] {
    for (auto& row : plan.send_rows_) {
      const std::int64_t key = row;
      if (!key_to_row.empty()) {
        if (key < 0 || key >= static_cast<std::int64_t>(key_to_row.size()))
          throw Error(ErrorCode::internal, "exchange plan: requested key " + std::to_string(key) + " out of range");
        row = key_to_row[static_cast<std::size_t>(key)];
      }
      if (row < 0 || row >= source_rows)
        throw Error(ErrorCode::internal, "exchange plan: requested source row " + std::to_string(row) + " out of range");
    }
  });
  return plan;
}

namespace {

/// Every rank's ranges, all-gathered: per rank its held ranges (sorted by begin, with their first local
/// row) and its wanted ranges (in order).
struct PeerRanges {
  std::vector<RowRange> held;
  std::vector<std::int64_t> held_first_row;
  std::vector<RowRange> wanted;
};

std::vector<PeerRanges> gather_ranges(const Comm& comm, std::span<const RowRange> held,
                                      std::span<const std::int64_t> first_row, std::span<const RowRange> wanted) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < held.size(); ++i)
    if (held[i].size() > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return held[a].begin < held[b].begin; });
  std::vector<std::int64_t> mine{static_cast<std::int64_t>(order.size()), static_cast<std::int64_t>(wanted.size())};
  for (const std::size_t i : order) mine.insert(mine.end(), {held[i].begin, held[i].end, first_row[i]});
  for (const RowRange& r : wanted) mine.insert(mine.end(), {r.begin, r.end});
  const int P = comm.size();
  std::vector<std::size_t> bytes(static_cast<std::size_t>(P)), offsets(static_cast<std::size_t>(P));
  const std::size_t my_bytes = mine.size() * sizeof(std::int64_t);
  comm.allgather(&my_bytes, sizeof(std::size_t), bytes.data());
  std::size_t total = 0;
  for (int r = 0; r < P; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += bytes[static_cast<std::size_t>(r)];
  }
  std::vector<std::int64_t> all(total / sizeof(std::int64_t));
  comm.allgatherv(mine.data(), my_bytes, all.data(), bytes, offsets);
  std::vector<PeerRanges> ranks(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    const std::int64_t* p = all.data() + offsets[static_cast<std::size_t>(r)] / sizeof(std::int64_t);
    const std::int64_t nh = p[0], nw = p[1];
    PeerRanges& rr = ranks[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < nh; ++i) {
      rr.held.push_back({p[2 + 3 * i], p[3 + 3 * i]});
      rr.held_first_row.push_back(p[4 + 3 * i]);
    }
    for (std::int64_t i = 0; i < nw; ++i) rr.wanted.push_back({p[2 + 3 * nh + 2 * i], p[3 + 3 * nh + 2 * i]});
  }
  return ranks;
}

/// Calls f(wanted_index, held_index, intersection) for every non-empty intersection of `wanted` (in
/// order) with `held` (sorted by begin), in that order.
template <class F>
void for_each_overlap(const std::vector<RowRange>& wanted, const std::vector<RowRange>& held, F&& f) {
  for (std::size_t i = 0; i < wanted.size(); ++i)
    for (std::size_t h = 0; h < held.size(); ++h) {
      const RowRange o{std::max(wanted[i].begin, held[h].begin), std::min(wanted[i].end, held[h].end)};
      if (o.begin < o.end) f(i, h, o);
    }
}

}  // namespace

ExchangePlan ExchangePlan::from_ranges(const Comm& comm, std::int64_t source_rows, std::span<const RowRange> held,
                                       std::span<const std::int64_t> held_first_row, std::span<const RowRange> wanted) {
  const int P = comm.size(), me = comm.rank();
  const auto up = static_cast<std::size_t>(P);
  collectively(comm, [&] {
    if (held.size() != held_first_row.size())
      throw Error(ErrorCode::internal, "exchange plan: held ranges and their first rows differ in length");
    for (std::size_t i = 0; i < held.size(); ++i)
      if (held[i].size() < 0 || held_first_row[i] < 0 || held_first_row[i] + held[i].size() > source_rows)
        throw Error(ErrorCode::internal, "exchange plan: held range [" + std::to_string(held[i].begin) + ", " +
                                             std::to_string(held[i].end) + ") outside the " +
                                             std::to_string(source_rows) + " source rows");
  });
  const std::vector<PeerRanges> ranks = gather_ranges(comm, held, held_first_row, wanted);
  // Every wanted row of every rank must be held exactly once: checked by every rank on the same data, so
  // all ranks throw together without another collective.
  for (int q = 0; q < P; ++q) {
    const std::vector<RowRange>& wanted_q = ranks[static_cast<std::size_t>(q)].wanted;
    std::vector<std::int64_t> covered(wanted_q.size(), 0);
    for (int r = 0; r < P; ++r)
      for_each_overlap(wanted_q, ranks[static_cast<std::size_t>(r)].held,
                       [&](std::size_t i, std::size_t, const RowRange& o) { covered[i] += o.size(); });
    for (std::size_t i = 0; i < wanted_q.size(); ++i)
      if (wanted_q[i].size() < 0 || covered[i] != wanted_q[i].size())
        throw Error(ErrorCode::internal, "exchange plan on " + comm.name() + ": rank " + std::to_string(q) +
                                             " wants rows [" + std::to_string(wanted_q[i].begin) + ", " +
                                             std::to_string(wanted_q[i].end) + "), of which " +
                                             std::to_string(covered[i]) +
                                             " are held (each must be held by exactly one rank)");
  }
  ExchangePlan plan;
  plan.comm_ = &comm;
  plan.source_rows_ = source_rows;
  const PeerRanges& mine = ranks[static_cast<std::size_t>(me)];
  // Target rows: the wanted ranges concatenated. Received from rank r in the order of my wanted ranges,
  // then by global row; sent to rank r in the order of r's wanted ranges, the same order.
  std::vector<std::int64_t> wanted_offset(mine.wanted.size() + 1, 0);
  for (std::size_t i = 0; i < mine.wanted.size(); ++i) wanted_offset[i + 1] = wanted_offset[i] + mine.wanted[i].size();
  plan.target_rows_ = wanted_offset.back();
  plan.recv_counts_.assign(up, 0);
  plan.send_counts_.assign(up, 0);
  for (int r = 0; r < P; ++r) {
    for_each_overlap(mine.wanted, ranks[static_cast<std::size_t>(r)].held, [&](std::size_t i, std::size_t, const RowRange& o) {
      for (std::int64_t g = o.begin; g < o.end; ++g) plan.recv_rows_.push_back(wanted_offset[i] + g - mine.wanted[i].begin);
      plan.recv_counts_[static_cast<std::size_t>(r)] += static_cast<std::size_t>(o.size());
    });
    for_each_overlap(ranks[static_cast<std::size_t>(r)].wanted, mine.held, [&](std::size_t, std::size_t h, const RowRange& o) {
      for (std::int64_t g = o.begin; g < o.end; ++g) plan.send_rows_.push_back(mine.held_first_row[h] + g - mine.held[h].begin);
      plan.send_counts_[static_cast<std::size_t>(r)] += static_cast<std::size_t>(o.size());
    });
  }
  plan.recv_offsets_ = detail::exclusive_offsets(plan.recv_counts_);
  plan.send_offsets_ = detail::exclusive_offsets(plan.send_counts_);
  return plan;
}

ExchangePlan ExchangePlan::all_gather(const Comm& comm, std::int64_t local_rows) {
  const int P = comm.size();
  const auto up = static_cast<std::size_t>(P);
  ExchangePlan plan;
  plan.comm_ = &comm;
  plan.all_gather_ = true;
  plan.source_rows_ = local_rows;
  std::vector<std::int64_t> rows(up);
  comm.allgather(&local_rows, sizeof local_rows, rows.data());
  plan.recv_counts_.assign(up, 0);
  plan.send_counts_.assign(up, static_cast<std::size_t>(local_rows));
  for (std::size_t r = 0; r < up; ++r) {
    plan.recv_counts_[r] = static_cast<std::size_t>(rows[r]);
    for (std::int64_t i = 0; i < rows[r]; ++i) plan.recv_rows_.push_back(plan.target_rows_ + i);
    plan.target_rows_ += rows[r];
    for (std::int64_t i = 0; i < local_rows; ++i) plan.send_rows_.push_back(i);
  }
  plan.recv_offsets_ = detail::exclusive_offsets(plan.recv_counts_);
  plan.send_offsets_ = detail::exclusive_offsets(plan.send_counts_);
  return plan;
}

// ---------------------------------------------------------------------------------------------------
// Moves

const Comm& ExchangePlan::comm() const {
  if (comm_ == nullptr) throw Error(ErrorCode::invalid_argument, "exchange plan: the plan was never built");
  return *comm_;
}

void ExchangePlan::rebind(const Comm& comm) {
  // The old communicator may be gone: its size is that of the per-peer counts.
  if (!send_counts_.empty() && static_cast<std::size_t>(comm.size()) != send_counts_.size())
    throw Error(ErrorCode::invalid_argument, "exchange plan: rebind to a communicator of " + std::to_string(comm.size()) +
                                                 " ranks, the plan was built over " + std::to_string(send_counts_.size()));
  comm_ = &comm;
}

void ExchangePlan::count(std::size_t row_bytes, bool forward_direction) const {
  const auto me = static_cast<std::size_t>(comm().rank());
  const std::vector<std::size_t>& out = forward_direction ? send_counts_ : recv_counts_;
  const std::vector<std::size_t>& in = forward_direction ? recv_counts_ : send_counts_;
  Traffic t;
  t.moves = 1;
  for (std::size_t q = 0; q < out.size(); ++q) {
    const std::uint64_t sent = out[q] * row_bytes, received = in[q] * row_bytes;
    if (q == me) {
      t.local += sent;
    } else {
      t.sent += sent;
      t.received += received;
    }
  }
  if (forward_direction) t.local += copies_.size() / 2 * row_bytes;
  traffic_ += t;
  if (sink_) *sink_ += t;
}

void ExchangePlan::move(const void* in, std::size_t element_bytes, std::int64_t ld_in, void* out, std::int64_t ld_out,
                        int width, bool forward_direction) const {
  const MoveTimer timer(*this);
  const Comm& comm = this->comm();
  const std::int64_t in_rows = forward_direction ? source_rows_ : target_rows_;
  const std::int64_t out_rows = forward_direction ? target_rows_ : source_rows_;
  Status local;
  if (width < 1) {
    local = {ErrorCode::invalid_argument, "exchange plan: width must be at least 1, found " + std::to_string(width)};
  } else if (ld_in < width || ld_out < width) {
    local = {ErrorCode::invalid_argument, "exchange plan: row stride below the width " + std::to_string(width)};
  } else if (all_gather_ && !forward_direction) {
    local = {ErrorCode::internal, "exchange plan: an all-gather has no backward move"};
  } else if ((in_rows > 0 && in == nullptr) || (out_rows > 0 && out == nullptr)) {
    local = {ErrorCode::invalid_argument, std::string("exchange plan: null ") + (in == nullptr ? "input" : "output") +
                                              " rows for " + std::to_string(in == nullptr ? in_rows : out_rows) + " rows"};
  }
  comm.agree_or_throw(local);

  const std::size_t row_bytes = element_bytes * static_cast<std::size_t>(width);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const auto in_row = [&](std::int64_t r) { return src + static_cast<std::size_t>(r * ld_in) * element_bytes; };
  const auto out_row = [&](std::int64_t r) { return dst + static_cast<std::size_t>(r * ld_out) * element_bytes; };
  const std::vector<std::int64_t>& pack_rows = forward_direction ? send_rows_ : recv_rows_;
  const std::vector<std::int64_t>& unpack_rows = forward_direction ? recv_rows_ : send_rows_;
  std::vector<std::size_t> pack_counts = forward_direction ? send_counts_ : recv_counts_;
  std::vector<std::size_t> unpack_counts = forward_direction ? recv_counts_ : send_counts_;
  const std::vector<std::size_t>& pack_offsets = forward_direction ? send_offsets_ : recv_offsets_;
  const std::vector<std::size_t>& unpack_offsets = forward_direction ? recv_offsets_ : send_offsets_;
  count(row_bytes, forward_direction);

  // Rows that stay on this rank are copied directly (the two segments list them in the same order).
  const auto me = static_cast<std::size_t>(comm.rank());
  copy_rows<true, true>(
      pack_counts[me], row_bytes, [&](std::size_t i) { return in_row(pack_rows[pack_offsets[me] + i]); },
      [&](std::size_t i) { return out_row(unpack_rows[unpack_offsets[me] + i]); }, forward_direction);
  pack_counts[me] = unpack_counts[me] = 0;

  // The others through one all-to-all (an all-gather sends its rows once); the buffers are kept.
  std::size_t packed = 0, unpacked = 0;
  for (std::size_t q = 0; q < pack_counts.size(); ++q) {
    packed += pack_counts[q];
    unpacked += unpack_counts[q];
  }
  if (all_gather_) packed = static_cast<std::size_t>(source_rows_);
  if (send_buffer_.size() < packed * row_bytes) send_buffer_.resize(packed * row_bytes);
  if (recv_buffer_.size() < unpacked * row_bytes) recv_buffer_.resize(unpacked * row_bytes);
  char* buffer = send_buffer_.data();
  if (all_gather_) {
    for (std::int64_t i = 0; i < source_rows_; ++i, buffer += row_bytes) std::memcpy(buffer, in_row(i), row_bytes);
    // Every rank's rows, this one's included, gathered into the receive buffer (kept between moves).
    std::vector<std::size_t> all_bytes(unpack_counts.size()), all_offsets(unpack_counts.size());
    std::size_t at = 0;
    for (std::size_t q = 0; q < unpack_counts.size(); ++q) {
      all_offsets[q] = at;
      all_bytes[q] = (q == me ? static_cast<std::size_t>(source_rows_) : unpack_counts[q]) * row_bytes;
      at += all_bytes[q];
    }
    if (recv_buffer_.size() < std::max<std::size_t>(at, 1)) recv_buffer_.resize(std::max<std::size_t>(at, 1));
    char* all = recv_buffer_.data();
    comm.allgatherv(send_buffer_.data(), static_cast<std::size_t>(source_rows_) * row_bytes, all, all_bytes, all_offsets);
    for (std::size_t q = 0; q < unpack_counts.size(); ++q) {
      if (q == me) continue;
      copy_rows<false, true>(
          unpack_counts[q], row_bytes, [&](std::size_t i) { return all + all_offsets[q] + i * row_bytes; },
          [&](std::size_t i) { return out_row(unpack_rows[unpack_offsets[q] + i]); }, true);
    }
    return;
  }
  for (std::size_t q = 0; q < pack_counts.size(); ++q) {
    copy_rows<true, false>(
        pack_counts[q], row_bytes, [&](std::size_t i) { return in_row(pack_rows[pack_offsets[q] + i]); },
        [&](std::size_t i) { return buffer + i * row_bytes; }, true);
    buffer += pack_counts[q] * row_bytes;
  }
  detail::alltoallv_elements(comm, send_buffer_.data(), pack_counts, recv_buffer_.data(), unpack_counts, row_bytes);
  buffer = recv_buffer_.data();
  for (std::size_t q = 0; q < unpack_counts.size(); ++q) {
    const char* from = buffer;
    copy_rows<false, true>(
        unpack_counts[q], row_bytes, [&](std::size_t i) { return from + i * row_bytes; },
        [&](std::size_t i) { return out_row(unpack_rows[unpack_offsets[q] + i]); }, forward_direction);
    buffer += unpack_counts[q] * row_bytes;
  }
  // In order, on one thread: the copies are within `out`.
  for (std::size_t i = 0; forward_direction && i < copies_.size() / 2; ++i)
    std::memcpy(out_row(copies_[2 * i]), out_row(copies_[2 * i + 1]), row_bytes);
}

void ExchangePlan::forward(const float* source, int width, float* target) const {
  move(source, sizeof(float), width, target, width, width, true);
}
void ExchangePlan::forward(const double* source, int width, double* target) const {
  move(source, sizeof(double), width, target, width, width, true);
}
void ExchangePlan::backward(const float* target, int width, float* source) const {
  move(target, sizeof(float), width, source, width, width, false);
}
void ExchangePlan::backward(const double* target, int width, double* source) const {
  move(target, sizeof(double), width, source, width, width, false);
}

void ExchangePlan::forward(const float* source, std::int64_t ld_source, float* target, std::int64_t ld_target,
                           int width, const Place& place) const {
  if (place.on_device())
    move_on_device(source, ld_source, target, ld_target, width, place, true);
  else
    move(source, sizeof(float), ld_source, target, ld_target, width, true);
}

void ExchangePlan::backward(const float* target, std::int64_t ld_target, float* source, std::int64_t ld_source,
                            int width, const Place& place) const {
  if (place.on_device())
    move_on_device(target, ld_target, source, ld_source, width, place, false);
  else
    move(target, sizeof(float), ld_target, source, ld_source, width, false);
}

#if !SURROGATE_HAVE_CUDA
void ExchangePlan::move_on_device(const float*, std::int64_t, float*, std::int64_t, int, const Place& place,
                                  bool) const {
  collectively(comm(), [&] { detail::refuse_without_cuda_backend("exchange plan", place.device); });
}
#endif

}  // namespace surrogate
