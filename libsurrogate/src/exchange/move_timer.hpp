// The timer of an exchange plan's moves (exchange_plan.cpp, exchange_device.cpp).
#pragma once

#include <chrono>

#include "surrogate/exchange.hpp"
#include "surrogate/profile.hpp"

namespace surrogate {

/// Adds the wall time of its scope to a plan's traffic and its sink; observers see it as the phase
/// "exchange" (PETSc's log event).
class ExchangePlan::MoveTimer {
 public:
  explicit MoveTimer(const ExchangePlan& plan) : plan_(plan), start_(std::chrono::steady_clock::now()) {}
  ~MoveTimer() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    plan_.traffic_.seconds += s;
    if (plan_.sink_) plan_.sink_->seconds += s;
  }
  MoveTimer(const MoveTimer&) = delete;
  MoveTimer& operator=(const MoveTimer&) = delete;

 private:
  const ExchangePlan& plan_;
  ObservedPhase observed_{kExchangePhase};
  std::chrono::steady_clock::time_point start_;
};

}  // namespace surrogate
