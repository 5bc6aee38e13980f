#include "surrogate/comm.hpp"

#include <cstring>

#include "device_support.hpp"

namespace surrogate {

// The out-of-line parts of surrogate/transport.hpp.
std::size_t size_of(DType type) noexcept {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

Traffic& Traffic::operator+=(const Traffic& other) {
  sent += other.sent;
  received += other.received;
  local += other.local;
  moves += other.moves;
  seconds += other.seconds;
  return *this;
}

std::string Comm::broadcast_string(const std::string& text, int root) const {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  broadcast(&length, sizeof length, root);
  std::string result = rank() == root ? text : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) broadcast(result.data(), static_cast<std::size_t>(length), root);
  return result;
}

Status Comm::agree(const Status& local) const {
  if (size() == 1) return local;
  std::int32_t first_failed = local.ok() ? size() : rank();
  allreduce(&first_failed, 1, DType::i32, ReduceOp::min);
  if (first_failed == size()) return {};
  std::int32_t code = static_cast<std::int32_t>(local.code);
  broadcast(&code, sizeof code, first_failed);
  const std::string message = broadcast_string(local.message, first_failed);
  return {static_cast<ErrorCode>(code), "rank " + std::to_string(first_failed) + ": " + message};
}

void Comm::agree_or_throw(const Status& local) const {
  const Status agreed = agree(local);
  if (!agreed.ok()) agreed.raise();
}

namespace {
/// 64-bit FNV-1a over a setting's name and value (a 0 byte between them).
std::uint64_t setting_digest(const Comm::Setting& setting) {
  std::uint64_t h = 14695981039346656037ull;
  const auto add = [&h](const std::string& text) {
    for (const char ch : text) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  };
  add(setting.first);
  h = (h ^ 0u) * 1099511628211ull;
  add(setting.second);
  return h;
}
}  // namespace

void Comm::agree_on_settings(const std::vector<Setting>& settings, const std::string& context) const {
  if (size() == 1) return;
  // One fixed-size record per rank: the number of settings and their digests (a rank with another count,
  // e.g. another version of a binding, differs from the first setting it lacks).
  constexpr std::size_t kMax = 32;
  struct Record {
    std::uint64_t count;
    std::uint64_t digest[kMax];
  } mine{};
  if (settings.size() > kMax)
    throw Error(ErrorCode::internal, context + ": more than " + std::to_string(kMax) + " settings to agree on");
  mine.count = settings.size();
  for (std::size_t i = 0; i < settings.size(); ++i) mine.digest[i] = setting_digest(settings[i]);
  std::vector<Record> all(static_cast<std::size_t>(size()));
  allgather(&mine, sizeof mine, all.data());
  const Record& root = all[0];
  std::size_t first = kMax;
  for (const Record& r : all)
    for (std::size_t i = 0; i < kMax && i < first; ++i)
      if ((i < r.count) != (i < root.count) || (i < r.count && r.digest[i] != root.digest[i])) first = i;
  if (first == kMax) return;
  std::string ranks;
  int differing = 0;
  for (int r = 1; r < size(); ++r) {
    const Record& other = all[static_cast<std::size_t>(r)];
    if ((first < other.count) == (first < root.count) && (first >= other.count || other.digest[first] == root.digest[first]))
      continue;
    ranks += (differing++ == 0 ? "" : ", ") + std::to_string(r);
  }
  // Every rank names the setting as rank 0 has it (rank 0 holds a value for `first`, or none at all).
  const std::string name = broadcast_string(rank() == 0 && first < settings.size() ? settings[first].first : "", 0);
  const std::string value = broadcast_string(rank() == 0 && first < settings.size() ? settings[first].second : "", 0);
  const std::string what = name.empty() ? "the settings (rank 0 passes " + std::to_string(root.count) + ")"
                                        : name + ": rank 0 has '" + value + "'";
  throw Error(ErrorCode::invalid_argument, context + ": the ranks disagree on " + what + ", rank" +
                                               (differing == 1 ? " " : "s ") + ranks +
                                               (differing == 1 ? " has" : " have") + " another (every rank must pass the same)");
}

DeviceTransport& Comm::device_transport(int device) const {
  for (const auto& [d, transport] : transports_)
    if (d == device) return *transport;
  std::shared_ptr<DeviceTransport> transport = make_device_transport(device);
  transports_.emplace_back(device, transport);
  return *transport;
}

#if !SURROGATE_HAVE_CUDA
std::shared_ptr<DeviceTransport> Comm::make_device_transport(int device) const {
  detail::refuse_without_cuda_backend("device transport", device);
}
#endif

void SelfComm::allgather(const void* send, std::size_t bytes, void* recv) const {
  if (bytes) std::memmove(recv, send, bytes);
}

void SelfComm::allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t>,
                          std::span<const std::size_t> recv_offsets) const {
  if (send_bytes) std::memmove(static_cast<char*>(recv) + recv_offsets[0], send, send_bytes);
}

void SelfComm::alltoallv(const void* send, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_offsets, void* recv, std::span<const std::size_t> recv_bytes,
                         std::span<const std::size_t> recv_offsets) const {
  if (send_bytes[0] != recv_bytes[0])
    throw Error(ErrorCode::communication, "alltoallv on one process: send and receive sizes differ");
  if (send_bytes[0])
    std::memmove(static_cast<char*>(recv) + recv_offsets[0], static_cast<const char*>(send) + send_offsets[0],
                 send_bytes[0]);
}

void SelfComm::sendrecv(const void* send, std::size_t send_bytes, int dest, void* recv, std::size_t recv_bytes,
                        int source, int) const {
  if ((dest != -1 && dest != 0) || (source != -1 && source != 0))
    throw Error(ErrorCode::communication, "sendrecv on one process: peer rank out of range");
  if (dest == 0 && source == 0) {
    if (send_bytes != recv_bytes) throw Error(ErrorCode::communication, "sendrecv to self: sizes differ");
    if (send_bytes) std::memmove(recv, send, send_bytes);
  }
}

}  // namespace surrogate
