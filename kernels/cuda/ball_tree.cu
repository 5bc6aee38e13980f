// Ball trees on the device (surrogate/kernels/cuda_ball_tree.hpp), bit for bit balltree::build and
// balltree::partition: a node's split dimension is the one of strictly largest max - min (in double), and
// std::nth_element at its middle leaves the order its children start from. The nodes of a level are
// independent, so the levels run one after another, every node of a level at once:
//   * a node of more than `wide_points` points gets many blocks, each round's steps a launch over its tiles
//     (ball_tree_wide.cuh), until one block can finish it;
//   * a node of more than `serial_points` points gets a block: the spreads by block reductions, then
//     libstdc++'s introselect rounds, the pivot chosen by one thread and each Hoare partition computed from
//     its stop positions (as balltree/introselect.hpp: the k-th left stop swaps with the k-th right stop
//     from the end while they have not crossed) listed by block scans; the rare heap selection and the
//     last insertion sort on one thread;
//   * a smaller node gets one thread, which builds its whole subtree with the replica itself
//     (surrogate/kernels/introselect.hpp).
// Elements are (key, point) pairs, the key the float32 coordinate of the node's split dimension: float32
// values compare as the float64 ones the host compares.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ball_tree_kernels.cuh"
#include "ball_tree_wide.cuh"
#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_tree.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

/// A level's nodes as the launches take them: those of a block each (block_*), then the wide ones
/// (wide_*: many blocks each, ball_tree_wide.cuh), each kind a run of `list`.
struct LevelSchedule {
  std::size_t block_at = 0, wide_at = 0, end = 0;  // the runs in `list`
  long long block_units = 0;
  int block_threads = 32;  // about 8 points per thread, 32 to kMaxThreads threads
  int wide_units = 0, wide_tiles = 0;
};

/// The threads of a block per node of at most `points` points: about 8 points per thread, 32 to 1024.
int block_threads_for(long long points) {
  int threads = 32;
  while (threads < ball_tree_kernels::kMaxThreads && threads * 8LL < points) threads *= 2;
  return threads;
}

}  // namespace

void ball_tree(const BallTreeArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, ball_tree(a, stream));
  using namespace ball_tree_kernels;
  const bool tree = a.target_level < 0;
  require(a.points >= 1 && a.points < 2147483647LL, "ball_tree", "points must be in 1 .. 2^31 - 2, found " + std::to_string(a.points));
  require(a.dim >= 1 && a.samples >= 1, "ball_tree", "need dim >= 1 and samples >= 1");
  require(a.positions && a.first && a.index && a.work && (!tree || a.mask), "ball_tree", "a null array");
  require(a.serial_points == 0 || a.serial_points >= 2, "ball_tree", "serial_points must be 0 or at least 2");
  require(a.wide_points == 0 || a.wide_points >= 3, "ball_tree", "wide_points must be 0 or at least 3");
  require(a.target_level < 62, "ball_tree", "target_level " + std::to_string(a.target_level) + " is too deep");
  require(a.first[0] == 0 && a.first[a.samples] == a.points, "ball_tree", "the offsets must run from 0 to points");
  const int serial = a.serial_points > 0 ? a.serial_points : kBallTreeSerialPoints;
  const int wide = a.wide_points > 0 ? a.wide_points : kBallTreeWidePoints;

  // The schedule: every sample's shape, its levels split by many blocks, by a block and by one thread.
  std::vector<SampleShape> shapes(static_cast<std::size_t>(a.samples));
  std::vector<int> wide_level(static_cast<std::size_t>(a.samples));  // the first level not split wide
  long long slots = 0;
  int block_levels = 0;
  const auto largest_node = [](std::int64_t n, int level) { return (n + (std::int64_t{1} << level) - 1) >> level; };
  for (int b = 0; b < a.samples; ++b) {
    const std::int64_t n = a.first[b + 1] - a.first[b];
    require(n >= (tree ? 2 : 1), "ball_tree", "sample " + std::to_string(b) + " has " + std::to_string(n) +
                                                  (tree ? " points; a tree needs at least 2" : " points"));
    SampleShape& s = shapes[static_cast<std::size_t>(b)];
    s.begin = a.first[b];
    s.n = static_cast<int>(n);
    s.levels = tree ? ball_tree_depth(n) : a.target_level;
    s.slot_begin = slots;
    if (tree) slots += ball_tree_padded_size(n);
    s.serial_level = 0;  // the first level whose nodes (at most ceil(n / 2^level) points) are small
    while (s.serial_level < s.levels && largest_node(n, s.serial_level) > serial) ++s.serial_level;
    int& w = wide_level[static_cast<std::size_t>(b)];
    w = 0;
    while (w < s.serial_level && largest_node(n, w) > wide) ++w;
    block_levels = s.serial_level > block_levels ? s.serial_level : block_levels;
  }
  std::vector<LaunchSample> list;  // per level its block run and its wide run, then the serial run
  std::vector<LevelSchedule> levels;
  std::size_t wide_nodes = 0, wide_cells = 0;  // the largest wide level: nodes, nodes x tiles
  for (int level = 0; level < block_levels; ++level) {
    LevelSchedule l;
    long long wide_units = 0, wide_largest = 0;
    for (int b = 0; b < a.samples; ++b)
      if (level < wide_level[static_cast<std::size_t>(b)]) {
        wide_units += 1LL << level;
        wide_largest = std::max<long long>(wide_largest, largest_node(shapes[static_cast<std::size_t>(b)].n, level));
      }
    const bool wide_fits = wide_units <= 65535;  // the launches' second grid dimension; else all by blocks
    long long block_largest = 0;
    l.block_at = list.size();
    for (int b = 0; b < a.samples; ++b) {
      const SampleShape& s = shapes[static_cast<std::size_t>(b)];
      if (level < s.serial_level && (level >= wide_level[static_cast<std::size_t>(b)] || !wide_fits)) {
        list.push_back(LaunchSample{l.block_units, b, level});
        l.block_units += 1LL << level;
        block_largest = std::max<long long>(block_largest, largest_node(s.n, level));
      }
    }
    require(l.block_units <= 2147483647LL, "ball_tree", "too many nodes at level " + std::to_string(level));
    l.block_threads = block_threads_for(block_largest);
    l.wide_at = list.size();
    if (wide_fits) {
      for (int b = 0; b < a.samples; ++b)
        if (level < wide_level[static_cast<std::size_t>(b)]) {
          list.push_back(LaunchSample{l.wide_units, b, level});
          l.wide_units += 1 << level;
        }
      l.wide_tiles = static_cast<int>((wide_largest + kWideTile - 1) / kWideTile);
      wide_nodes = std::max<std::size_t>(wide_nodes, static_cast<std::size_t>(l.wide_units));
      wide_cells = std::max<std::size_t>(wide_cells, static_cast<std::size_t>(l.wide_units) * l.wide_tiles);
    }
    l.end = list.size();
    levels.push_back(l);
  }
  const std::size_t serial_at = list.size();
  long long serial_units = 0;
  for (int b = 0; b < a.samples; ++b) {
    const int level = shapes[static_cast<std::size_t>(b)].serial_level;
    list.push_back(LaunchSample{serial_units, b, level});
    serial_units += 1LL << level;
  }

  const auto points = static_cast<std::size_t>(a.points);
  const std::size_t work_bytes = aligned(points * sizeof(Entry)), stop_bytes = aligned(points * sizeof(int)),
                    shape_bytes = aligned(shapes.size() * sizeof(SampleShape)),
                    list_bytes = aligned(list.size() * sizeof(LaunchSample)),
                    node_bytes = aligned(wide_nodes * sizeof(WideNode)),
                    count_bytes = aligned(wide_cells * sizeof(StopCounts)),
                    partial_bytes = aligned(wide_cells * 2 * static_cast<std::size_t>(a.dim) * sizeof(double));
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  a.work->bytes.resize(work_bytes + 2 * stop_bytes + shape_bytes + list_bytes + node_bytes + count_bytes + partial_bytes,
                       device);
  unsigned char* at = a.work->bytes.data();
  const auto take = [&](std::size_t bytes) {
    unsigned char* p = at;
    at += bytes;
    return p;
  };
  Context c{};
  c.positions = a.positions;
  c.dim = a.dim;
  c.tree = tree;
  c.work = reinterpret_cast<Entry*>(take(work_bytes));
  c.lefts = reinterpret_cast<int*>(take(stop_bytes));
  c.rights = reinterpret_cast<int*>(take(stop_bytes));
  auto* device_shapes = reinterpret_cast<SampleShape*>(take(shape_bytes));
  auto* device_list = reinterpret_cast<LaunchSample*>(take(list_bytes));
  auto* nodes = reinterpret_cast<WideNode*>(take(node_bytes));
  auto* counts = reinterpret_cast<StopCounts*>(take(count_bytes));
  auto* partial = reinterpret_cast<double*>(take(partial_bytes));
  c.shapes = device_shapes;
  c.index = a.index;
  c.mask = a.mask;
  copy_to_device(device_shapes, shapes.data(), shapes.size() * sizeof(SampleShape), stream);
  copy_to_device(device_list, list.data(), list.size() * sizeof(LaunchSample), stream);

  launch(identity_kernel, dim3(blocks_for("ball_tree", a.points, kThreads)), kThreads, 0, stream, c.work, a.points);
  check_launch("identity_kernel");
  std::vector<WideNode> states;
  for (const LevelSchedule& l : levels) {
    if (l.block_units > 0) {
      launch(split_level_kernel, dim3(static_cast<unsigned>(l.block_units)), l.block_threads, 0, stream, c,
             static_cast<const LaunchSample*>(device_list + l.block_at), static_cast<int>(l.wide_at - l.block_at));
      check_launch("split_level_kernel");
    }
    if (l.wide_units == 0) continue;
    // The wide nodes: split dimension and keys over every tile, then the rounds, launched four at a time
    // until the host reads that no node is left to them (one wait per four rounds); one block each finishes.
    const int units = l.wide_units, tiles = l.wide_tiles;
    const dim3 per_node(static_cast<unsigned>((units + kWideNodeThreads - 1) / kWideNodeThreads));
    const dim3 per_tile(static_cast<unsigned>(tiles), static_cast<unsigned>(units));
    launch(wide_setup_kernel, per_node, kWideNodeThreads, 0, stream, c,
           static_cast<const LaunchSample*>(device_list + l.wide_at), static_cast<int>(l.end - l.wide_at), units, nodes);
    check_launch("wide node setup");
    launch(wide_spread_kernel, per_tile, kWideThreads, 0, stream, c, static_cast<const WideNode*>(nodes), tiles, partial);
    check_launch("wide node spreads");
    launch(wide_dimension_kernel, per_node, kWideNodeThreads, 0, stream, c, units, tiles,
           static_cast<const double*>(partial), nodes);
    check_launch("wide node dimension");
    launch(wide_keys_kernel, per_tile, kWideThreads, 0, stream, c, static_cast<const WideNode*>(nodes));
    check_launch("wide node keys");
    states.resize(static_cast<std::size_t>(units));
    for (int round = 1;; ++round) {
      launch(wide_pivot_kernel, per_node, kWideNodeThreads, 0, stream, c.work, units, wide, nodes);
      check_launch("wide node pivot");
      launch(wide_count_kernel, per_tile, kWideThreads, 0, stream, static_cast<const Entry*>(c.work),
             static_cast<const WideNode*>(nodes), tiles, counts);
      check_launch("wide node counts");
      launch(wide_scan_kernel, dim3(static_cast<unsigned>(units)), kWideThreads, 0, stream, tiles, counts, nodes);
      check_launch("wide node scan");
      launch(wide_write_kernel, per_tile, kWideThreads, 0, stream, c, static_cast<const WideNode*>(nodes), tiles,
             static_cast<const StopCounts*>(counts));
      check_launch("wide node stops");
      launch(wide_search_kernel, per_node, kWideNodeThreads, 0, stream, c, units, nodes);
      check_launch("wide node search");
      launch(wide_swap_kernel, per_tile, kWideThreads, 0, stream, c, static_cast<const WideNode*>(nodes), tiles);
      check_launch("wide node swaps");
      if (round % 4 != 0) continue;
      copy_to_host(states.data(), nodes, states.size() * sizeof(WideNode), stream);
      synchronize(stream);
      if (std::none_of(states.begin(), states.end(), [](const WideNode& w) { return w.active != 0; })) break;
    }
    launch(select_rest_kernel, dim3(static_cast<unsigned>(units)), block_threads_for(wide), 0, stream, c,
           static_cast<const WideNode*>(nodes));
    check_launch("wide node rest");
  }
  launch(finish_kernel, dim3(blocks_for("ball_tree", serial_units, kSerialThreads)), kSerialThreads, 0, stream, c,
         static_cast<const LaunchSample*>(device_list + serial_at), static_cast<int>(list.size() - serial_at), serial_units);
  check_launch("finish_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
