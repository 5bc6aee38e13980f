// What the spherical models' device Execs share (CUDA builds only; transformer.cpp, layer.cpp): the
// forward's buffers on the device, the launches on one stream with a failure kept as pending and agreed
// over the ranks before each exchange (so a failure on any rank is the same Error on every rank), the
// ExchangePlan device moves (the comm's DeviceTransport), and the rows to and from the host.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../../device/compute_graph.hpp"
#include "../../device/layers.hpp"
#include "../transformer/program.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sphere {

/// The device arrays a forward object keeps between forwards (program::Buf, grown as needed).
struct DeviceBuffers {
  static constexpr auto kCount = static_cast<std::size_t>(program::Buf::count);
  kernels::cuda::DeviceBuffer<float> floats[kCount];
  kernels::cuda::DeviceBuffer<double> doubles[kCount];
  kernels::cuda::DeviceBuffer<float> in, out;  // this rank's input and output rows
};

/// One forward's device work (collective over `comm`): the members of an Exec but tiles and once.
class DeviceRun {
 public:
  DeviceRun(const char* model, int device, cudaStream_t stream, const Comm& comm, DeviceBuffers& buffers)
      : model_(model), device_(device), stream_(stream), comm_(comm), buffers_(buffers),
        place_{device, stream, &comm.device_transport(device)} {
    launch([&] { guard_.emplace(device_); });
  }

  /// Runs `work` unless an earlier launch failed; a failure is kept as pending.
  template <class F>
  void launch(F&& work) {
    if (!pending_.ok()) return;
    try {
      work();
    } catch (...) {
      pending_ = surrogate::detail::status_of_current_cuda_error(model_, device_);
    }
  }
  /// Collective: the stream's work done and the pending failure, if any rank has one, raised on every rank.
  void settle() {
    launch([&] { kernels::cuda::synchronize(stream_); });
    raise_pending();
  }
  /// Before an exchange: settle() across ranks; one rank has nothing to agree on and moves on the stream,
  /// so only a failure so far is raised (the kernels' own surface at the download's wait).
  void agree() {
    if (comm_.size() > 1) return settle();
    raise_pending();
  }
  /// The pending failure, if any rank has one, raised on every rank (collective).
  void raise_pending() {
    const Status local = std::move(pending_);
    pending_ = {};
    comm_.agree_or_throw(local);
  }

  program::Rows rows(program::Buf b, index_t rows, int width) {
    auto& buf = buffers_.floats[static_cast<std::size_t>(b)];
    grow(buf, static_cast<std::size_t>(rows * width));
    return {buf.data(), width, rows, width, ops::Place::device};
  }
  double* sums(program::Buf b, index_t count) {
    auto& buf = buffers_.doubles[static_cast<std::size_t>(b)];
    grow(buf, static_cast<std::size_t>(count));
    return buf.data();
  }
  void exchange(const ExchangePlan& plan, const program::Rows& src, const program::Rows& dst, int width) {
    agree();
    plan.forward(src.data, src.ld, dst.data, dst.ld, width, place_);
  }
  /// Doubles move as two floats each (the bytes unchanged).
  void exchange(const ExchangePlan& plan, const double* src, double* dst, int width) {
    agree();
    plan.forward(reinterpret_cast<const float*>(src), 2 * width, reinterpret_cast<float*>(dst), 2 * width, 2 * width,
                 place_);
  }
  /// The stages of `compute` on this rank's stream (it raises its failures: see raise_pending): across
  /// ranks launched one by one; on one rank one captured graph, replayed while `key_of()` stays the same
  /// (device::ComputeGraph). The key names the bands; the buffers' and the given addresses are added.
  template <class KeyOf, class Compute>
  void run_graph(surrogate::device::ComputeGraph& graph, KeyOf&& key_of, Compute&& compute) {
    if (comm_.size() > 1) {  // the exchanges send messages between the stages
      graph.reset();
      return compute();
    }
    const auto key = [&] {
      surrogate::device::ComputeGraph::Key k = key_of();
      for (std::size_t b = 0; b < DeviceBuffers::kCount; ++b)
        for (const void* p : {static_cast<const void*>(buffers_.floats[b].data()),
                              static_cast<const void*>(buffers_.doubles[b].data())})
          k.push_back(reinterpret_cast<std::uintptr_t>(p));
      return k;
    };
    launch([&] {
      graph.run(device_, stream_, key, [&] {
        compute();
        raise_pending();  // a failure ends the capture: no partial graph is kept
      });
    });
  }

  struct NoPhase {};
  NoPhase phase(program::Stage) const { return {}; }

  /// Whether the forward's input and output rows are in this device's memory (Model::predict_device's
  /// gathered rows) rather than host memory: then upload() only views them and download() copies on the
  /// device.
  bool rows_on_device = false;

  /// `n` host rows (width values at row stride ld) to the device rows buffers.in.
  program::Rows upload(const float* host, index_t ld, index_t n, int width) {
    if (rows_on_device) return ops::view(host, ld, n, width, ops::Place::device);
    staging_.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(width));
    for (index_t r = 0; r < n; ++r) std::copy_n(host + r * ld, width, staging_.data() + r * width);
    grow(buffers_.in, staging_.size());
    launch([&] {
      kernels::cuda::copy_to_device(buffers_.in.data(), staging_.data(), staging_.size() * sizeof(float), stream_);
    });
    return {buffers_.in.data(), width, n, width, ops::Place::device};
  }
  /// Rows of buffers.out, n of `width` values, for the output.
  program::Rows output(index_t n, int width) {
    grow(buffers_.out, static_cast<std::size_t>(n * width));
    return {buffers_.out.data(), width, n, width, ops::Place::device};
  }
  /// Collective (settles): the device rows `rows` (dense) into host rows at row stride ld. Device rows
  /// (rows_on_device) are copied on the stream; one rank then leaves them enqueued there (agree()).
  void download(const program::Rows& rows, float* host, index_t ld) {
    if (rows_on_device) {
      launch([&] {
        surrogate::device::copy_rows(rows.data, rows.ld, nullptr, host, ld, nullptr, rows.rows, rows.width, stream_);
      });
      return agree();
    }
    staging_.resize(static_cast<std::size_t>(rows.rows) * static_cast<std::size_t>(rows.width));
    launch([&] {
      kernels::cuda::copy_to_host(staging_.data(), rows.data, staging_.size() * sizeof(float), stream_);
    });
    settle();
    for (index_t r = 0; r < rows.rows; ++r) std::copy_n(staging_.data() + r * rows.width, rows.width, host + r * ld);
  }

 protected:
  template <class T>
  void grow(kernels::cuda::DeviceBuffer<T>& buf, std::size_t count) {
    launch([&] { buf.resize(std::max<std::size_t>(count, 1), device_); });
  }

  const char* model_;
  int device_;
  cudaStream_t stream_;
  const Comm& comm_;
  DeviceBuffers& buffers_;
  Place place_;
  Status pending_;
  std::optional<kernels::cuda::DeviceGuard> guard_;
  std::vector<float> staging_;
};

}  // namespace surrogate::sphere
