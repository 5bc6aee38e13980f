// Rank ranges of the distributed ball tree (share/docs/balltree.md, "Distributed tree").
#include <algorithm>
#include <cstring>
#include <string>

#include "distributed_internal.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/error.hpp"

namespace surrogate::balltree {

int RankRanges::owner(std::int64_t pos) const {
  // The last rank whose range starts at or before pos (empty ranks before it are skipped).
  const auto it = std::upper_bound(bounds.begin(), bounds.end() - 1, pos);
  return static_cast<int>(it - bounds.begin()) - 1;
}

}  // namespace surrogate::balltree
