// Per-sample inputs and outputs of the PETSc adapters (SurrogateSetSampleInputsVec,
// SurrogateGetSampleOutputsVec), run by ctest at 1, 2 and 3 ranks with the golden Sequoia model files
// tests/data/sequoia/sequoia_{seg,cls}.h5 (their /golden groups are not read): 60 points in the unit ball,
// one sample, dealt in contiguous blocks.
//  - segmentation (4 values per sample in, 6 per point out): the Vec path with the class vector from a
//    sequential Vec gives bitwise the one-process prediction (C API on PETSC_COMM_SELF); a Vec of the
//    wrong size is PETSC_ERR_ARG_SIZ; a predict without the class vector fails on every rank;
//  - classification (40 values per sample, no per-point outputs): SurrogatePredictVecs with no output
//    Vecs, then a sequential Vec of 40 values on every rank, bitwise the one-process logits.
#include <gtest/gtest.h>
#include <petscvec.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "surrogate/petsc.h"

namespace {

constexpr PetscInt N = 60;
MPI_Comm world() { return PETSC_COMM_WORLD; }
std::string model(const char* kind) { return std::string(SURROGATE_TEST_DATA_DIR) + "/sequoia/sequoia_" + kind + ".h5"; }

std::vector<double> coords() {
  std::vector<double> c(3 * N);
  for (PetscInt i = 0; i < N; ++i)
    for (int a = 0; a < 3; ++a) c[static_cast<std::size_t>(3 * i + a)] = 0.6 * std::sin(0.913 * static_cast<double>(i) + 2.1 * a + 0.01 * i * a);
  return c;
}

struct Block {
  PetscInt start = 0, n = 0;
};
Block mine() {
  int r = 0, p = 1;
  MPI_Comm_rank(world(), &r);
  MPI_Comm_size(world(), &p);
  return {N * r / p, N * (r + 1) / p - N * r / p};
}

/// An MPI Vec of block size bs holding rows [start, start + n) of `all` (bs values per row).
Vec block_vec(const Block& b, int bs, const std::vector<double>& all) {
  Vec v;
  EXPECT_EQ(VecCreateMPI(world(), bs * b.n, PETSC_DETERMINE, &v), 0);
  EXPECT_EQ(VecSetBlockSize(v, bs), 0);
  PetscScalar* a;
  EXPECT_EQ(VecGetArray(v, &a), 0);
  for (PetscInt i = 0; i < bs * b.n; ++i) a[i] = all.empty() ? 0.0 : all[static_cast<std::size_t>(bs * b.start + i)];
  EXPECT_EQ(VecRestoreArray(v, &a), 0);
  return v;
}

std::vector<double> values(Vec v) {
  PetscInt n;
  VecGetLocalSize(v, &n);
  const PetscScalar* a;
  VecGetArrayRead(v, &a);
  std::vector<double> out(a, a + n);
  VecRestoreArrayRead(v, &a);
  return out;
}

Vec seq(const std::vector<double>& v) {
  Vec s;
  EXPECT_EQ(VecCreateSeq(PETSC_COMM_SELF, static_cast<PetscInt>(v.size()), &s), 0);
  PetscScalar* a;
  VecGetArray(s, &a);
  for (std::size_t i = 0; i < v.size(); ++i) a[i] = v[i];
  VecRestoreArray(s, &a);
  return s;
}

/// One-process prediction of all points through the C API: per-point outputs (seg) or per-sample (cls).
std::vector<double> one_process(const char* kind, const std::vector<double>& c, const std::vector<double>& classes) {
  surrogate_t h = nullptr;
  EXPECT_EQ(surrogate_open(MPI_COMM_SELF, model(kind).c_str(), nullptr, &h), SURROGATE_OK) << surrogate_last_error();
  EXPECT_EQ(surrogate_set_points_f64(h, N, 3, c.data(), 3, 1, nullptr, nullptr), SURROGATE_OK);
  int cout = 0, sin = 0, sout = 0;
  surrogate_out_channels(h, &cout);
  surrogate_sample_channels(h, &sin, &sout);
  if (sin > 0) surrogate_set_sample_inputs_f64(h, 1, sin, classes.data());
  std::vector<double> out(static_cast<std::size_t>(N * cout)), s(static_cast<std::size_t>(sout));
  EXPECT_EQ(surrogate_predict_f64(h, c.data(), 3, 1, cout ? out.data() : nullptr, cout, 1), SURROGATE_OK)
      << surrogate_last_error();
  if (sout > 0) {
    EXPECT_EQ(surrogate_get_sample_outputs_f64(h, sout, s.data()), SURROGATE_OK);
  }
  surrogate_close(&h);
  return sout > 0 ? s : out;
}

template <class F>
PetscErrorCode caught(F&& call) {
  PetscPushErrorHandler(PetscReturnErrorHandler, nullptr);
  const PetscErrorCode code = call();
  PetscPopErrorHandler();
  return code;
}

bool bitwise(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

TEST(PetscSamples, SegmentationClassVectorFromASequentialVec) {
  const Block b = mine();
  const std::vector<double> c = coords(), classes{0, 0, 1, 0};
  surrogate_t s = nullptr;
  ASSERT_EQ(surrogate_open(world(), model("seg").c_str(), nullptr, &s), SURROGATE_OK) << surrogate_last_error();
  Vec X = block_vec(b, 3, c), IN = block_vec(b, 3, c), OUT = block_vec(b, 6, {});
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  const PetscErrorCode missing = caught([&] { return SurrogatePredictVec(s, IN, OUT); });
  int lo = missing, hi = missing;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, world());
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, world());
  EXPECT_EQ(missing, PETSC_ERR_LIB);
  EXPECT_EQ(lo, hi) << "the ranks disagree";
  Vec wrong = seq({0, 1, 0});
  EXPECT_EQ(caught([&] { return SurrogateSetSampleInputsVec(s, wrong); }), PETSC_ERR_ARG_SIZ);
  Vec C = seq(classes);
  ASSERT_EQ(SurrogateSetSampleInputsVec(s, C), 0);
  ASSERT_EQ(SurrogatePredictVec(s, IN, OUT), 0);
  const std::vector<double> all = one_process("seg", c, classes);
  const std::vector<double> want(all.begin() + 6 * b.start, all.begin() + 6 * (b.start + b.n));
  EXPECT_TRUE(bitwise(values(OUT), want));
  for (Vec* v : {&X, &IN, &OUT, &wrong, &C}) VecDestroy(v);
  surrogate_close(&s);
}

TEST(PetscSamples, ClassificationLogitsAsASequentialVecOnEveryRank) {
  const Block b = mine();
  const std::vector<double> c = coords();
  surrogate_t s = nullptr;
  ASSERT_EQ(surrogate_open(world(), model("cls").c_str(), nullptr, &s), SURROGATE_OK) << surrogate_last_error();
  Vec X = block_vec(b, 3, c);
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  std::vector<double> ch[3];
  Vec in[3];
  for (int k = 0; k < 3; ++k) {
    for (PetscInt i = 0; i < N; ++i) ch[k].push_back(c[static_cast<std::size_t>(3 * i + k)]);
    in[k] = block_vec(b, 1, ch[k]);
  }
  ASSERT_EQ(SurrogatePredictVecs(s, 3, in, 0, nullptr), 0);
  Vec logits = nullptr;
  ASSERT_EQ(SurrogateGetSampleOutputsVec(s, &logits), 0);
  MPI_Comm comm;
  PetscObjectGetComm(reinterpret_cast<PetscObject>(logits), &comm);
  int compare = 0;
  MPI_Comm_compare(comm, PETSC_COMM_SELF, &compare);
  EXPECT_TRUE(compare == MPI_IDENT || compare == MPI_CONGRUENT) << "a sequential Vec";
  EXPECT_TRUE(bitwise(values(logits), one_process("cls", c, {})));
  for (Vec* v : {&X, &in[0], &in[1], &in[2], &logits}) VecDestroy(v);
  surrogate_close(&s);
}

}  // namespace
