// BSA's Ops on the CPU: HostOps (ops/host_ops.hpp) and BSA's sample-wise branches (branches.hpp), each
// called once over all rows through the exec's `whole` and spread by its own OpenMP loop over `threads()`
// threads. The members are here rather than in HostOps so that the shared layer does not depend on a
// family; their arguments are rows.hpp's, shared with CudaOps.
#pragma once

#include "../ops/host_ops.hpp"
#include "branches.hpp"

namespace surrogate::bsa {

class BsaHostOps : public ops::HostOps {
 public:
  using HostOps::HostOps;

  /// The threads the branch members spread over; 1 unless set.
  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }

  void compress(const ops::CompressArgs<Dense>& a) const {
    detail::compress_blocks(kernels(), a.mlp, a.tokens.data, a.tokens.ld, a.out.rows, a.C, a.heads,
                            a.tokens.width / a.heads, a.out.data, a.out.ld, threads_);
  }

  void coarse_select(const ops::CoarseSelectArgs& a) const {
    const detail::Blocks b{a.qc.data, a.kc.data, a.vc.data, a.kc.ld, a.blocks};
    detail::coarse_and_select(kernels(), tokens(a.q, a.q, a.q, a.heads, a.samples, a.length, a.row0), b, a.shape,
                              a.out.data, a.out.ld, a.sel, threads_);
  }

  void selected_attention(const ops::SelectedAttentionArgs& a) const {
    const detail::Tokens t = tokens(a.q, a.k, a.v, a.heads, a.samples, a.length, 0);
    if (a.first_row == nullptr) {
      detail::fine_branch(kernels(), t, a.shape, a.sel, a.out.data, a.out.ld, threads_);
      return;
    }
    const detail::SelectedRows from{a.k.data, a.v.data, a.k.ld, a.blocks, a.first_row};
    detail::fine_branch(kernels(), t, a.shape, a.sel, a.out.data, a.out.ld, threads_, &from);
  }

  void global_attention(const ops::GlobalAttentionArgs& a) const {
    const detail::SampleKeys keys{a.k.data, a.v.data, a.k.ld, a.keys};
    detail::global_attention(kernels(), tokens(a.q, a.k, a.v, a.heads, a.samples, a.length, 0), a.out.data,
                             a.out.ld, threads_, &keys);
  }

 private:
  static detail::Tokens tokens(const ops::Rows& q, const ops::Rows& k, const ops::Rows& v, int heads, int samples,
                               index_t length, index_t row0) {
    detail::Tokens t;
    t.q = q.data;
    t.k = k.data;
    t.v = v.data;
    t.ld = q.ld;
    t.samples = samples;
    t.n = length;
    t.heads = heads;
    t.E = q.width / heads;
    t.row0 = row0;
    return t;
  }

  int threads_ = 1;
};

}  // namespace surrogate::bsa
