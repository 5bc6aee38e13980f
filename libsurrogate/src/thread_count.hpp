// The OpenMP thread count of one forward or plan build (RunOptions::threads), restored afterwards: the
// caller's OpenMP settings are not changed (surrogate/model.hpp, RunOptions).
#pragma once

#include <omp.h>

namespace surrogate::detail {

/// Sets the OpenMP thread count of the calling thread (threads > 0; 0 keeps it) and restores it.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

}  // namespace surrogate::detail
