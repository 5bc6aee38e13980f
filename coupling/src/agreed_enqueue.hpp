// Device collectives that every rank enqueues on its own stream (NCCL), with their enqueue agreed over
// the ranks before any rank waits for its stream; share/docs/cuda.md, "Across ranks: NCCL or MPI".
#pragma once

#include <type_traits>
#include <utility>

#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"

namespace surrogate::detail {

/// When the enqueue of a collective fails on one rank, the collectives its peers did enqueue never
/// complete, and a peer waiting for its stream would wait for ever. So every call agrees on the
/// enqueue first (one small allreduce on the host, the stream is not waited for); after a failure
/// anywhere every rank calls `abort` (ncclCommAbort ends the pending collectives) and throws the agreed
/// error. The communicator then stays refused: later calls throw that error again on every rank, with
/// no communication and without calling `enqueue`.
class AgreedEnqueue {
 public:
  explicit AgreedEnqueue(const Comm& comm) : comm_(comm) {}

  template <class Enqueue, class Abort>
  void operator()(Enqueue&& enqueue, Abort&& abort) {
    static_assert(std::is_nothrow_invocable_v<Abort>, "the abort runs while an error is being agreed");
    if (!failure_.ok())
      throw Error(failure_.code, "the device communicator was aborted after an earlier failure (" +
                                     failure_.message + "); a new handle gets a new communicator");
    Status local;
    try {
      std::forward<Enqueue>(enqueue)();
    } catch (...) {
      local = Status::from_current_exception();
    }
    const Status agreed = comm_.agree(local);
    if (agreed.ok()) return;
    std::forward<Abort>(abort)();
    failure_ = agreed;
    agreed.raise();
  }

  bool aborted() const { return !failure_.ok(); }

 private:
  const Comm& comm_;
  Status failure_;
};

}  // namespace surrogate::detail
