// The timing of the *_mpi_steps benchmarks: a plan built once, then `calls` predicts, each time the slowest
// rank's wall time, and the bytes the plan moved between ranks per predict, summed over the ranks.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>

#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"

namespace mpi_steps {

struct Times {
  double plan_s = 0, best_s = 1e30, sent_mb = 0;  // sent: bytes between ranks per forward, all ranks
};

/// `make_plan()` returns the plan; `predict(plan)` runs one forward with it.
template <class MakePlan, class Predict>
Times time_steps(const surrogate::Comm& comm, int calls, const MakePlan& make_plan, const Predict& predict) {
  const auto slowest = [&comm](double s) { return comm.allreduce(s, surrogate::ReduceOp::max); };
  Times t;
  double t0 = MPI_Wtime();
  const auto plan = make_plan();
  t.plan_s = slowest(MPI_Wtime() - t0);
  const std::uint64_t sent_before = plan->traffic().sent;
  for (int call = 0; call < calls; ++call) {
    comm.barrier();
    t0 = MPI_Wtime();
    predict(*plan);
    t.best_s = std::min(t.best_s, slowest(MPI_Wtime() - t0));
  }
  const auto sent = static_cast<double>(plan->traffic().sent - sent_before) / calls;
  t.sent_mb = comm.allreduce(sent, surrogate::ReduceOp::sum) / 1e6;
  return t;
}

}  // namespace mpi_steps
