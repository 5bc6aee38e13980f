// Row exchanges of the distributed ball tree (share/docs/balltree.md, "Distributed tree"): the
// all-to-all plans solver layout <-> tree layout and tree order <-> rotated order.
#include <algorithm>
#include <cstring>
#include <string>

#include "distributed_internal.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/error.hpp"

namespace surrogate::balltree {

int RankRanges::owner(std::int64_t pos) const {
  // The last rank whose range starts at or before pos (empty ranks before it are skipped).
  const auto it = std::upper_bound(bounds.begin(), bounds.end() - 1, pos);
  return static_cast<int>(it - bounds.begin()) - 1;
}

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

}  // namespace detail

void ExchangePlan::rebind(const Comm& comm) {
  // The old communicator may be gone: its size is that of the per-peer counts.
  if (!send_counts_.empty() && static_cast<std::size_t>(comm.size()) != send_counts_.size())
    throw Error(ErrorCode::invalid_argument, "exchange plan: rebind to a communicator of " + std::to_string(comm.size()) +
                                                 " ranks, the plan was built over " + std::to_string(send_counts_.size()));
  comm_ = &comm;
}

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

const Comm& ExchangePlan::comm() const {
  if (comm_ == nullptr) throw Error(ErrorCode::invalid_argument, "exchange plan: the plan was never built");
  return *comm_;
}

void ExchangePlan::exchange_packed(const float* packed, int width, float* unpacked, bool forward_direction) const {
  const Comm& comm = this->comm();
  const auto me = static_cast<std::size_t>(comm.rank());
  std::vector<std::size_t> pack_counts = forward_direction ? send_counts_ : recv_counts_;
  std::vector<std::size_t> unpack_counts = forward_direction ? recv_counts_ : send_counts_;
  pack_counts[me] = unpack_counts[me] = 0;
  std::size_t packed_rows = 0, unpacked_rows = 0;
  for (std::size_t q = 0; q < pack_counts.size(); ++q) {
    packed_rows += pack_counts[q];
    unpacked_rows += unpack_counts[q];
  }
  Status local;
  if (width < 1)
    local = {ErrorCode::invalid_argument, "exchange plan: width must be at least 1, found " + std::to_string(width)};
  else if ((packed_rows > 0 && packed == nullptr) || (unpacked_rows > 0 && unpacked == nullptr))
    local = {ErrorCode::invalid_argument, std::string("exchange plan: null packed ") + (packed == nullptr ? "input" : "output") +
                                              " rows"};
  comm.agree_or_throw(local);
  detail::alltoallv_elements(comm, packed, pack_counts, unpacked, unpack_counts,
                             sizeof(float) * static_cast<std::size_t>(width));
}

void ExchangePlan::move(const void* in, std::size_t row_bytes, void* out, bool forward_direction, int width) const {
  if (comm_ == nullptr) throw Error(ErrorCode::invalid_argument, "exchange plan: the plan was never built");
  const Comm& comm = *comm_;
  const std::int64_t in_rows = forward_direction ? source_rows_ : target_rows_;
  const std::int64_t out_rows = forward_direction ? target_rows_ : source_rows_;
  Status local;
  if (width < 1) {
    local = {ErrorCode::invalid_argument, "exchange plan: width must be at least 1, found " + std::to_string(width)};
  } else if ((in_rows > 0 && in == nullptr) || (out_rows > 0 && out == nullptr)) {
    local = {ErrorCode::invalid_argument, std::string("exchange plan: null ") + (in == nullptr ? "input" : "output") +
                                              " rows for " + std::to_string(in == nullptr ? in_rows : out_rows) + " rows"};
  }
  comm.agree_or_throw(local);

  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const std::vector<std::int64_t>& pack_rows = forward_direction ? send_rows_ : recv_rows_;
  const std::vector<std::int64_t>& unpack_rows = forward_direction ? recv_rows_ : send_rows_;
  std::vector<std::size_t> pack_counts = forward_direction ? send_counts_ : recv_counts_;
  std::vector<std::size_t> unpack_counts = forward_direction ? recv_counts_ : send_counts_;
  const std::vector<std::size_t>& pack_offsets = forward_direction ? send_offsets_ : recv_offsets_;
  const std::vector<std::size_t>& unpack_offsets = forward_direction ? recv_offsets_ : send_offsets_;
  auto row = [row_bytes](auto* base, std::int64_t r) { return base + static_cast<std::size_t>(r) * row_bytes; };

  // Rows that stay on this rank are copied directly (the two segments list them in the same order).
  const auto me = static_cast<std::size_t>(comm.rank());
  for (std::size_t i = 0; i < pack_counts[me]; ++i)
    std::memcpy(row(dst, unpack_rows[unpack_offsets[me] + i]), row(src, pack_rows[pack_offsets[me] + i]), row_bytes);
  pack_counts[me] = unpack_counts[me] = 0;

  // The others through one all-to-all; the buffers are kept between calls.
  std::size_t packed = 0, unpacked = 0;
  for (std::size_t q = 0; q < pack_counts.size(); ++q) {
    packed += pack_counts[q];
    unpacked += unpack_counts[q];
  }
  if (send_buffer_.size() < packed * row_bytes) send_buffer_.resize(packed * row_bytes);
  if (recv_buffer_.size() < unpacked * row_bytes) recv_buffer_.resize(unpacked * row_bytes);
  char* buffer = send_buffer_.data();
  for (std::size_t q = 0; q < pack_counts.size(); ++q)
    for (std::size_t i = 0; i < pack_counts[q]; ++i, buffer += row_bytes)
      std::memcpy(buffer, row(src, pack_rows[pack_offsets[q] + i]), row_bytes);
  detail::alltoallv_elements(comm, send_buffer_.data(), pack_counts, recv_buffer_.data(), unpack_counts, row_bytes);
  buffer = recv_buffer_.data();
  for (std::size_t q = 0; q < unpack_counts.size(); ++q)
    for (std::size_t i = 0; i < unpack_counts[q]; ++i, buffer += row_bytes)
      std::memcpy(row(dst, unpack_rows[unpack_offsets[q] + i]), buffer, row_bytes);
  if (forward_direction)
    for (std::size_t i = 0; i < copies_.size(); i += 2) std::memcpy(row(dst, copies_[i]), row(dst, copies_[i + 1]), row_bytes);
}

void ExchangePlan::forward(const float* source, int width, float* target) const {
  move(source, sizeof(float) * static_cast<std::size_t>(std::max(width, 0)), target, true, width);
}
void ExchangePlan::forward(const double* source, int width, double* target) const {
  move(source, sizeof(double) * static_cast<std::size_t>(std::max(width, 0)), target, true, width);
}
void ExchangePlan::backward(const float* target, int width, float* source) const {
  move(target, sizeof(float) * static_cast<std::size_t>(std::max(width, 0)), source, false, width);
}
void ExchangePlan::backward(const double* target, int width, double* source) const {
  move(target, sizeof(double) * static_cast<std::size_t>(std::max(width, 0)), source, false, width);
}

}  // namespace surrogate::balltree
