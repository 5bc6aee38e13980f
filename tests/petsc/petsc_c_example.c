/* The PETSc adapters from C (surrogate/petsc.h is a C header): opens the model named by -surrogate_model,
 * predicts on a few points with an interlaced and a per-channel Vec layout and checks that both agree.
 * ctest runs it with -surrogate_vtk and -log_view (the SurrogatePredict event must be listed) and with
 * -help (the surrogate options must be listed). */
#include <petscvec.h>

#include "surrogate/petsc.h"

static const char help[] = "Calls a surrogate model on PETSc Vecs from C.\n";

int main(int argc, char** argv) {
  surrogate_t s = NULL;
  const char* dir = NULL;
  Vec coords, in, out, ch[2], out1;
  PetscInt n = 20, i, rstart, rend, cin_bs;
  PetscScalar *x, *f, *c0, *c1;
  PetscReal diff, norm;
  int cin = 0;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(SurrogateCreateFromOptions(PETSC_COMM_WORLD, NULL, &s));
  PetscCall(SurrogateGetVTKDirectory(s, &dir));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "vtk directory: %s\n", dir ? dir : "(none)"));
  PetscCheck(surrogate_in_channels(s, &cin) == SURROGATE_OK, PETSC_COMM_WORLD, PETSC_ERR_LIB, "surrogate: %s", surrogate_last_error());
  cin_bs = cin;

  /* n points per rank on the unit square; inputs (2x - 1, y^2). */
  PetscCall(VecCreate(PETSC_COMM_WORLD, &coords));
  PetscCall(VecSetSizes(coords, 2 * n, PETSC_DETERMINE));
  PetscCall(VecSetBlockSize(coords, 2));
  PetscCall(VecSetFromOptions(coords));
  PetscCall(VecCreate(PETSC_COMM_WORLD, &in));
  PetscCall(VecSetSizes(in, cin_bs * n, PETSC_DETERMINE));
  PetscCall(VecSetBlockSize(in, cin_bs));
  PetscCall(VecSetFromOptions(in));
  PetscCall(VecCreateMPI(PETSC_COMM_WORLD, n, PETSC_DETERMINE, &out));
  PetscCall(VecDuplicate(out, &out1));
  PetscCall(VecDuplicate(out, &ch[0]));
  PetscCall(VecDuplicate(out, &ch[1]));
  PetscCall(VecGetOwnershipRange(out, &rstart, &rend));
  PetscCall(VecGetArray(coords, &x));
  PetscCall(VecGetArray(in, &f));
  PetscCall(VecGetArray(ch[0], &c0));
  PetscCall(VecGetArray(ch[1], &c1));
  for (i = 0; i < n; ++i) {
    const PetscReal t = (PetscReal)(rstart + i) / (PetscReal)(n * 4);
    x[2 * i] = t;
    x[2 * i + 1] = 1.0 - t * t;
    c0[i] = f[cin_bs * i] = 2.0 * x[2 * i] - 1.0;
    c1[i] = f[cin_bs * i + 1] = x[2 * i + 1] * x[2 * i + 1];
  }
  PetscCall(VecRestoreArray(ch[1], &c1));
  PetscCall(VecRestoreArray(ch[0], &c0));
  PetscCall(VecRestoreArray(in, &f));
  PetscCall(VecRestoreArray(coords, &x));

  PetscCall(SurrogateSetPointsVec(s, coords));
  PetscCall(SurrogatePredictVec(s, in, out));
  PetscCall(SurrogatePredictVecs(s, 2, ch, 1, &out1));
  PetscCall(VecNorm(out, NORM_2, &norm));
  PetscCall(VecAXPY(out1, -1.0, out));
  PetscCall(VecNorm(out1, NORM_INFINITY, &diff));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "prediction norm %g, interlaced vs per-channel max difference %g\n", (double)norm,
                        (double)diff));
  PetscCheck(diff == 0.0, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "the two layouts differ by %g", (double)diff);

  PetscCall(VecDestroy(&ch[1]));
  PetscCall(VecDestroy(&ch[0]));
  PetscCall(VecDestroy(&out1));
  PetscCall(VecDestroy(&out));
  PetscCall(VecDestroy(&in));
  PetscCall(VecDestroy(&coords));
  PetscCall(SurrogateDestroy(&s));
  PetscCall(PetscFinalize());
  return 0;
}
