/* surrogate PETSc adapters: open a surrogate model from the PETSc options database and call it on PETSc
 * Vecs inside a PETSc solver's time loop. A C interface, usable from C and C++ PETSc codes; compiled into
 * libsurrogate_coupling when the library was built with PETSc (then SURROGATE_HAVE_PETSC is defined for
 * every target that links surrogate::coupling). See share/docs/petsc.md.
 *
 *   surrogate_t s;
 *   PetscCall(SurrogateCreateFromOptions(PETSC_COMM_WORLD, NULL, &s));   // -surrogate_model heat.h5
 *   PetscCall(SurrogateSetPointsVec(s, coords));                          // block size = dim
 *   for (step ...) PetscCall(SurrogatePredictVec(s, in, out));            // block sizes = channels
 *   PetscCall(SurrogateAcceptOrSolve(s, ksp, b, x, PETSC_DEFAULT, &ok, &r)); // x: a predicted solution
 *   PetscCall(SurrogateSNESAcceptOrSolve(s, snes, NULL, x, PETSC_DEFAULT, &ok, &fnorm)); // nonlinear systems
 *   PetscCall(SurrogateDestroy(&s));
 *
 * Conventions
 *  - Every function returns a PetscErrorCode and raises errors with PETSc's error machinery (SETERRQ),
 *    so PetscCall() in the caller propagates them and -on_error_abort etc. apply. A failure inside the
 *    surrogate library becomes PETSC_ERR_LIB with the message "surrogate: <surrogate_last_error()>".
 *  - Every function except SurrogateGetVTKDirectory is COLLECTIVE over the communicator of the handle
 *    (the Vecs must live on the same communicator). Errors are agreed: a wrong local size on one rank is
 *    the same PETSc error, with the same message, on every rank (no hang).
 *  - Points: the rank's points are the local part of the coordinate Vec, in local order; inputs and
 *    outputs are the local parts of Vecs with exactly one value per point and channel in that order.
 *  - Arrays are passed to the library without copies (VecGetArrayRead/VecGetArray and strided views);
 *    only SurrogatePredictVecs with several separately allocated Vecs per side gathers them into one
 *    buffer. PetscScalar must be real (double or single precision); complex builds get PETSC_ERR_SUP.
 *  - -log_view shows the events SurrogateSetPoints, SurrogatePredict and SurrogateCheck (class "Surrogate").
 */
#ifndef SURROGATE_PETSC_H
#define SURROGATE_PETSC_H

#include <petscksp.h>
#include <petscsnes.h>
#include <petscvec.h>

#include "surrogate.h"

/* Registers the "Surrogate" class and its log events (SurrogateSetPoints, SurrogatePredict, SurrogateCheck).
 * Called by every function below; call it yourself only to have the events listed before the first use. */
PETSC_EXTERN PetscErrorCode SurrogateInitializePackage(void);

/* COLLECTIVE. Opens the model named in the options database (PetscOptionsBegin/End, so -help lists the
 * keys; every key takes the optional prefix, e.g. -heat_surrogate_model for prefix "heat_"):
 *   -surrogate_model <file>          the model file (required)
 *   -surrogate_device <cpu>          device string (this build: cpu)
 *   -surrogate_precision <fp32>      fp32, tf32 (CUDA devices), bf16 (CUDA devices; CPUs with BF16: flare),
 *                                    fp64 (CPU; families that offer it)
 *   -surrogate_threads <n>           OpenMP threads per rank, 0 = OMP_NUM_THREADS
 *   -surrogate_reproducible <bool>   bitwise-identical results for any rank count, partition, threads
 *   -surrogate_allow_non_finite_output <bool>  hand NaN/Inf predictions to the caller (default: an error)
 *   -surrogate_vtk <directory>       stored with the handle for the solver's output: SurrogateGetVTKDirectory
 *   -surrogate_vtk_format <vtu>      vtu or vtkhdf, stored with the handle: SurrogateGetVTKFormat gives the
 *                                    SURROGATE_VTK_FORMAT_* value for surrogate_vtk_open_format
 *   -surrogate_accept_rtol <r>       SurrogateAcceptOrSolve accepts a prediction x of A x = b when
 *                                    ||b - A x|| / ||b|| <= r (default 0: only an exact one)
 *   -surrogate_accept_atol <a>       SurrogateSNESAcceptOrSolve accepts a prediction x of F(x) = b when
 *                                    ||F(x) - b|| < a (default: the SNES's own -snes_atol)
 * prefix may be NULL. Release the handle with SurrogateDestroy. */
PETSC_EXTERN PetscErrorCode SurrogateCreateFromOptions(MPI_Comm comm, const char prefix[], surrogate_t* surrogate);

/* COLLECTIVE. Closes the handle (NULL or *surrogate == NULL: nothing to do) and sets it to NULL. Use it
 * rather than surrogate_close() for handles from SurrogateCreateFromOptions (it also forgets their
 * -surrogate_vtk directory); it closes handles from surrogate_open too. */
PETSC_EXTERN PetscErrorCode SurrogateDestroy(surrogate_t* surrogate);

/* Not collective. The -surrogate_vtk directory given to SurrogateCreateFromOptions, or NULL when the option
 * was not set (or the handle was opened otherwise). The string belongs to the handle. */
PETSC_EXTERN PetscErrorCode SurrogateGetVTKDirectory(surrogate_t surrogate, const char* directory[]);

/* Not collective. The -surrogate_vtk_format given to SurrogateCreateFromOptions as SURROGATE_VTK_FORMAT_VTU
 * or SURROGATE_VTK_FORMAT_VTKHDF (VTU when the option was not set or the handle was opened otherwise):
 *   surrogate_vtk_open_format(comm, dir, "heat", format, &vtk). */
PETSC_EXTERN PetscErrorCode SurrogateGetVTKFormat(surrogate_t surrogate, int* format);

/* COLLECTIVE. The rank's points: coords has block size dim (1..16) and holds, interlaced, the coordinates
 * of the rank's n_local = local size / dim points. The global point ids given to the library are the
 * Vec's global block indices. Builds the plan that every predict reuses until the points change. */
PETSC_EXTERN PetscErrorCode SurrogateSetPointsVec(surrogate_t surrogate, Vec coords);

/* COLLECTIVE. Interlaced layout: in has block size in_channels and local size n_local * in_channels
 * (point-major: the channels of point i are entries i * in_channels + c); out has block size
 * out_channels and local size n_local * out_channels. n_local is the rank's point count given to
 * SurrogateSetPointsVec (or surrogate_set_points_*); physical units, in the order of the points. in and
 * out must be different Vecs. A model of the positions alone (0 input channels) takes in = NULL. */
PETSC_EXTERN PetscErrorCode SurrogatePredictVec(surrogate_t surrogate, Vec in, Vec out);

/* COLLECTIVE. One Vec per channel: nin == in_channels Vecs in[c] and nout == out_channels Vecs out[c],
 * each with local size n_local (any layout and block size: the local ownership range decides which
 * points the rank owns, in the order of SurrogateSetPointsVec). */
PETSC_EXTERN PetscErrorCode SurrogatePredictVecs(surrogate_t surrogate, PetscInt nin, const Vec in[], PetscInt nout,
                                                 const Vec out[]);

/* Per-sample inputs and outputs (petsc.md, "Per-sample inputs and outputs"). Not collective.
 * SurrogateSetSampleInputsVec: v holds, on every rank, all B x sample_in values (sample-major: the
 * values of sample b at b * sample_in + c; a VECSEQ on PETSC_COMM_SELF, say), the same on every rank;
 * the following predicts use them (and fail on every rank when they differ between ranks).
 * SurrogateGetSampleOutputsVec: a new sequential Vec (PETSC_COMM_SELF) on every rank holding the last
 * predict's B x sample_out values (sample-major), the same on every rank; destroy it with VecDestroy.
 * A model whose output is one row per sample has out_channels 0: predict with SurrogatePredictVecs(s,
 * nin, in, 0, NULL). */
PETSC_EXTERN PetscErrorCode SurrogateSetSampleInputsVec(surrogate_t surrogate, Vec v);
PETSC_EXTERN PetscErrorCode SurrogateGetSampleOutputsVec(surrogate_t surrogate, Vec* v);
/* COLLECTIVE over the KSP's communicator. Accept a predicted solution of the KSP's linear system, or solve.
 * On entry x holds the prediction (e.g. the surrogate's next state). The relative residual
 * ||b - A x||_2 / ||b||_2 (A: the KSP's operator; one MatMult and one reduction; ||b - A x||_2 when b = 0)
 * is global, so every rank takes the same decision:
 *   - residual <= rtol: the prediction is accepted, x is unchanged and the KSP is not called;
 *   - otherwise x is solved with KSPSolve from the prediction as the initial guess (from zero when the
 *     residual is not finite); the KSP's own setting of KSPSetInitialGuessNonzero is restored afterwards.
 * rtol >= 0, the same on every rank (checked); PETSC_DEFAULT takes the handle's -surrogate_accept_rtol.
 * accepted and residual may be NULL. Whether a solve converged is the KSP's business
 * (KSPGetConvergedReason, -ksp_error_if_not_converged), as after KSPSolve. */
PETSC_EXTERN PetscErrorCode SurrogateAcceptOrSolve(surrogate_t surrogate, KSP ksp, Vec b, Vec x, PetscReal rtol,
                                                   PetscBool* accepted, PetscReal* residual);

/* Not collective. The tolerance SurrogateAcceptOrSolve uses for PETSC_DEFAULT: -surrogate_accept_rtol for a
 * handle from SurrogateCreateFromOptions, else the last SurrogateSetAcceptTolerance, else 0. Set it to the
 * same value on every rank (rtol >= 0). */
PETSC_EXTERN PetscErrorCode SurrogateSetAcceptTolerance(surrogate_t surrogate, PetscReal rtol);
PETSC_EXTERN PetscErrorCode SurrogateGetAcceptTolerance(surrogate_t surrogate, PetscReal* rtol);

/* COLLECTIVE over the SNES's communicator. The nonlinear counterpart of SurrogateAcceptOrSolve: accept a
 * predicted solution of the SNES's system F(x) = b (b may be NULL: F(x) = 0), or start Newton from it.
 * On entry x holds the prediction. ||F(x) - b||_2 (one evaluation of the SNES's function, into its own
 * residual Vec) is global, so every rank takes the same decision:
 *   - ||F(x) - b||_2 < atol: accepted, x is unchanged and SNESSolve is not called. With the default atol
 *     this is the test SNESSolve itself applies to an initial guess before its first step (an absolute
 *     one: its relative tolerance measures from the guess);
 *   - otherwise SNESSolve(snes, b, x) from the prediction (from zero when the residual is not finite);
 *     SNESSolve evaluates F(x) once more.
 * atol >= 0, the same on every rank (checked); PETSC_DEFAULT takes the handle's -surrogate_accept_atol if
 * it was given, else the SNES's absolute tolerance (SNESGetTolerances, -snes_atol). accepted and fnorm
 * (||F(x) - b||_2 of the prediction) may be NULL. Whether Newton converged is the SNES's business
 * (SNESGetConvergedReason, -snes_error_if_not_converged). The evaluation is logged as SurrogateCheck. */
PETSC_EXTERN PetscErrorCode SurrogateSNESAcceptOrSolve(surrogate_t surrogate, SNES snes, Vec b, Vec x, PetscReal atol,
                                                       PetscBool* accepted, PetscReal* fnorm);
/* The log events (valid after SurrogateInitializePackage), for PetscLogEventGetPerfInfo and the like.
 * SURROGATE_Check: the residual of SurrogateAcceptOrSolve and SurrogateSNESAcceptOrSolve (their solves are
 * logged as KSPSolve and SNESSolve). */
PETSC_EXTERN PetscClassId SURROGATE_CLASSID;
PETSC_EXTERN PetscLogEvent SURROGATE_SetPoints;
PETSC_EXTERN PetscLogEvent SURROGATE_Predict;
PETSC_EXTERN PetscLogEvent SURROGATE_Check;

#endif /* SURROGATE_PETSC_H */
