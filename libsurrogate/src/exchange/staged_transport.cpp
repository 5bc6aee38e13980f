// The default DeviceTransport of a Comm (CUDA builds): device buffers staged through host memory and the
// Comm's own collectives. Each step's device part is agreed before the messages, so a failed copy on one
// rank is the same Error on every rank, never a hang.
#include <algorithm>
#include <numeric>
#include <vector>

#include "../cuda_errors.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate {
namespace {

namespace cu = kernels::cuda;

std::size_t extent(std::span<const std::size_t> bytes, std::span<const std::size_t> offsets) {
  std::size_t end = 0;
  for (std::size_t q = 0; q < bytes.size(); ++q)
    if (bytes[q] > 0) end = std::max(end, offsets[q] + bytes[q]);
  return end;
}

class StagedTransport final : public DeviceTransport {
 public:
  StagedTransport(const Comm& comm, int device) : DeviceTransport(device), comm_(comm) {}
  std::string name() const override { return "host staging through " + comm_.name(); }
  bool direct() const override { return false; }

  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_offsets,
                 void* stream) override {
    const std::size_t out = extent(send_bytes, send_offsets), in = extent(recv_bytes, recv_offsets);
    download(send, out, stream);
    host_in_.resize(std::max<std::size_t>(in, 1));
    comm_.alltoallv(host_out_.data(), send_bytes, send_offsets, host_in_.data(), recv_bytes, recv_offsets);
    upload(recv, in, stream);
  }

  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets, void* stream) override {
    const std::size_t in = extent(recv_bytes, recv_offsets);
    download(send, send_bytes, stream);
    host_in_.resize(std::max<std::size_t>(in, 1));
    comm_.allgatherv(host_out_.data(), send_bytes, host_in_.data(), recv_bytes, recv_offsets);
    upload(recv, in, stream);
  }

  void allreduce(void* data, std::size_t count, DType type, ReduceOp op, void* stream) override {
    const std::size_t bytes = count * size_of(type);
    download(data, bytes, stream);
    comm_.allreduce(host_out_.data(), count, type, op);
    host_in_.swap(host_out_);
    upload(data, bytes, stream);
  }

 private:
  void download(const void* device_data, std::size_t bytes, void* stream) {
    collectively(comm_, [&] {
      host_out_.resize(std::max<std::size_t>(bytes, 1));
      try {
        cu::DeviceGuard guard(device());
        if (bytes > 0) cu::copy_to_host(host_out_.data(), device_data, bytes, static_cast<cudaStream_t>(stream));
        cu::synchronize(static_cast<cudaStream_t>(stream));
      } catch (...) {
        detail::raise_current_cuda_error("device transport", device());
      }
    });
  }
  void upload(void* device_data, std::size_t bytes, void* stream) {
    collectively(comm_, [&] {
      try {
        cu::DeviceGuard guard(device());
        if (bytes > 0) cu::copy_to_device(device_data, host_in_.data(), bytes, static_cast<cudaStream_t>(stream));
        cu::synchronize(static_cast<cudaStream_t>(stream));  // host_in_ is reused by the next call
      } catch (...) {
        detail::raise_current_cuda_error("device transport", device());
      }
    });
  }

  const Comm& comm_;
  std::vector<char> host_out_, host_in_;
};

}  // namespace

std::shared_ptr<DeviceTransport> Comm::make_device_transport(int device) const {
  return std::make_shared<StagedTransport>(*this, device);
}

}  // namespace surrogate
