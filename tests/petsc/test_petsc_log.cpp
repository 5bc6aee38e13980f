// PETSc's log (-log_view) sees the library's phases (share/docs/coupling.md, "Profiling with PETSc"):
// every declared phase is the event "surrogate <phase>", registered with the same id on every rank (what
// -log_view's reductions need), counted once per plan build or forward on every rank, nested inside
// SurrogateSetPoints / SurrogatePredict, and the exchanges' moves are the event "surrogate exchange".
// Run at 1, 2 and 3 ranks on the Erwin golden model tests/data/erwin/erwin_shapenet_car.h5 (its kNN graph
// rule, message passing and ball attention, exchanges when distributed; no input channels, so the input
// Vec is NULL), with unequal shares and an empty rank.
#include <gtest/gtest.h>
#include <petscvec.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "surrogate/petsc.h"
#include "surrogate/profile.hpp"

namespace {

constexpr PetscInt N = 300;

MPI_Comm world() { return PETSC_COMM_WORLD; }
int rank() {
  int r = 0;
  MPI_Comm_rank(world(), &r);
  return r;
}
int size() {
  int s = 1;
  MPI_Comm_size(world(), &s);
  return s;
}

// Rows [start, start + n) of this rank: weights 0, 1, 2, ... (rank 0 owns nothing when there are
// several ranks, the others unequal shares).
void my_rows(PetscInt* start, PetscInt* n) {
  const int p = size(), r = rank();
  PetscInt total = 0, before = 0;
  for (int k = 0; k < p; ++k) total += p == 1 ? 1 : k;
  for (int k = 0; k < r; ++k) before += p == 1 ? 1 : k;
  *start = N * before / total;
  *n = N * (before + (p == 1 ? 1 : r)) / total - *start;
}

Vec make_vec(PetscInt start, PetscInt n, PetscInt bs, std::uint64_t seed) {
  Vec v;
  EXPECT_EQ(VecCreate(world(), &v), 0);
  EXPECT_EQ(VecSetSizes(v, n * bs, N * bs), 0);
  EXPECT_EQ(VecSetBlockSize(v, bs), 0);
  EXPECT_EQ(VecSetType(v, VECSTANDARD), 0);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> global(static_cast<std::size_t>(N * bs));
  for (double& x : global) x = u(gen);
  PetscScalar* a;
  EXPECT_EQ(VecGetArray(v, &a), 0);
  for (PetscInt i = 0; i < n * bs; ++i) a[i] = global[static_cast<std::size_t>(start * bs + i)];
  EXPECT_EQ(VecRestoreArray(v, &a), 0);
  return v;
}

struct Counts {
  int count = 0;
  double seconds = 0;
};
Counts event(const std::string& name) {
  PetscLogEvent id;
  PetscEventPerfInfo info;
  EXPECT_EQ(PetscLogEventGetId(name.c_str(), &id), 0) << name;
  EXPECT_EQ(PetscLogEventGetPerfInfo(0, id, &info), 0) << name;  // stage 0: the main stage
  return {info.count, info.time};
}

TEST(PetscLog, EveryPhaseIsAnEventWithTheSameIdOnEveryRank) {
  surrogate_t s = nullptr;
  surrogate_options o;
  surrogate_options_default(&o);
  o.threads = 1;
  ASSERT_EQ(surrogate_open(world(), SURROGATE_TEST_DATA_DIR "/erwin/erwin_shapenet_car.h5", &o, &s), SURROGATE_OK)
      << surrogate_last_error();
  int dim = 0, cin = 0, cout = 0;
  ASSERT_EQ(surrogate_position_dim(s, &dim), SURROGATE_OK);
  ASSERT_EQ(surrogate_in_channels(s, &cin), SURROGATE_OK);
  ASSERT_EQ(surrogate_out_channels(s, &cout), SURROGATE_OK);
  PetscInt start = 0, n = 0;
  my_rows(&start, &n);
  ASSERT_EQ(cin, 0);  // positions only: the input Vec is NULL
  Vec X = make_vec(start, n, dim, 1), OUT = make_vec(start, n, cout, 3);

  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);  // registers the events (the package's initialisation)
  const std::vector<std::string> phases = surrogate::phase_names();
  for (const char* expected : {"plan", "forward", "exchange", "embedding", "message passing", "ball attention levels"})
    EXPECT_NE(std::find(phases.begin(), phases.end(), expected), phases.end()) << expected;
  for (const std::string& phase : phases) {
    PetscLogEvent id = -1;
    ASSERT_EQ(PetscLogEventGetId(("surrogate " + phase).c_str(), &id), 0) << phase;
    int lo = id, hi = id;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, world());
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, world());
    EXPECT_EQ(lo, hi) << "the event of phase '" << phase << "' has different ids on the ranks";
  }

  const Counts predict0 = event("SurrogatePredict"), forward0 = event("surrogate forward");
  const Counts passing0 = event("surrogate message passing"), balls0 = event("surrogate ball attention levels");
  const Counts exchange0 = event("surrogate exchange");
  ASSERT_EQ(SurrogatePredictVec(s, nullptr, OUT), 0);
  ASSERT_EQ(SurrogatePredictVec(s, nullptr, OUT), 0);
  const Counts predict = event("SurrogatePredict"), forward = event("surrogate forward");
  EXPECT_EQ(predict.count - predict0.count, 2);
  EXPECT_EQ(forward.count - forward0.count, 2) << "one forward event per prediction, on every rank";
  EXPECT_EQ(event("surrogate message passing").count - passing0.count, 2);
  EXPECT_EQ(event("surrogate ball attention levels").count - balls0.count, 2);
  // Nested: a phase's time is part of its caller's.
  EXPECT_LE(forward.seconds - forward0.seconds, predict.seconds - predict0.seconds);
  EXPECT_LE(event("surrogate ball attention levels").seconds - balls0.seconds, forward.seconds - forward0.seconds);
  EXPECT_EQ(event("surrogate plan").count, 1) << "the plan is built once for the points";
  if (size() > 1) {  // distributed forwards move rows between the ranks, every rank taking part
    EXPECT_GT(event("surrogate exchange").count - exchange0.count, 0);
  }

  EXPECT_EQ(VecDestroy(&X), 0);
  EXPECT_EQ(VecDestroy(&OUT), 0);
  EXPECT_EQ(surrogate_close(&s), SURROGATE_OK);
}

}  // namespace
