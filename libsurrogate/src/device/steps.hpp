// The device steps of a forward that may run on several ranks, and their failures (CUDA builds only): one
// rule for every device forward whose steps alternate with collective exchanges. share/docs/cuda.md,
// "Across ranks: NCCL or MPI".
#pragma once

#include <cuda_runtime_api.h>

#include <exception>
#include <optional>
#include <utility>

#include "../cuda_errors.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::device {

/// run() executes a step (launches, copies, host work between exchanges) with the device current; a
/// failure becomes an Error naming the model and the device (detail::raise_current_cuda_error). In one
/// process it is thrown at once. Across ranks (begin() with a communicator) it is kept and the rank's later
/// steps are skipped until agree(), called before every collective, throws the same Error on every rank:
/// no rank waits in a collective another rank has left.
class Steps {
 public:
  Steps(const char* what, int device) : what_(what), device_(device) {}

  /// A new call: its ranks (null: one process); a kept failure is dropped.
  void begin(const Comm* comm) {
    comm_ = comm;
    pending_ = nullptr;
  }
  const Comm* comm() const { return comm_; }

  template <class Work>
  void run(Work&& work) {
    if (pending_) return;  // this rank failed earlier: nothing more until the failure is agreed
    try {
      detail::on_device(what_, device_, work);
    } catch (...) {
      if (comm_ == nullptr) throw;
      pending_ = std::current_exception();
    }
  }

  /// `work` between two CUDA events on `stream`: returns the device milliseconds between them, read by
  /// waiting for the device (0 without `timed`, or when this rank has failed). The events are made and
  /// read in steps, so their failures are kept or thrown like any other.
  template <class Work>
  double timed(cudaStream_t stream, bool timed, Work&& work) {
    std::optional<kernels::cuda::Event> t0, t1;
    if (timed)
      run([&] {
        t0.emplace(device_);
        t1.emplace(device_);
        t0->record(stream);
      });
    work();
    double ms = 0.0;
    if (timed)
      run([&] {
        t1->record(stream);
        kernels::cuda::synchronize(stream);
        ms = t1->elapsed_ms_since(*t0);
      });
    return ms;
  }

  /// Across ranks: a kept failure of any rank becomes the same Error on every rank (one agreement).
  void agree() {
    if (comm_ == nullptr) return;
    collectively(*comm_, [&] {
      if (pending_) std::rethrow_exception(std::exchange(pending_, nullptr));
    });
  }

 private:
  const char* what_;
  int device_;
  const Comm* comm_ = nullptr;
  std::exception_ptr pending_;
};

}  // namespace surrogate::device
