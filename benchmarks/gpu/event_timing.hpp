// The GPU drivers' kernel timing: the best CUDA-event time of repeated runs on one stream.
#pragma once

#include <algorithm>
#include <functional>

#include "surrogate/kernels/cuda.hpp"

namespace bench_gpu {

/// Best CUDA-event milliseconds of `repeats` runs of `run` (which enqueues on `stream`), after one warm-up.
inline double best_ms(int repeats, int device, cudaStream_t stream, const std::function<void()>& run) {
  namespace cu = surrogate::kernels::cuda;
  run();
  cu::synchronize(stream);
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    cu::Event start(device), stop(device);
    start.record(stream);
    run();
    stop.record(stream);
    cu::synchronize(stream);
    best = std::min(best, static_cast<double>(stop.elapsed_ms_since(start)));
  }
  return best;
}

}  // namespace bench_gpu
