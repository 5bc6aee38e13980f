! surrogate: the Fortran interface of the surrogate library (learned attention surrogates called from an
! MPI solver's time loop). It binds the C API (coupling/include/surrogate.h, the single source of truth)
! with ISO_C_BINDING and wraps it in Fortran-friendly procedures.
!
!   use mpi_f08            ! or: use mpi (integer communicators work too)
!   use surrogate
!   type(surrogate_t) :: s
!   real(real64), allocatable :: xy(:,:), uvp(:,:)      ! xy(n_local, 2), uvp(n_local, 3)
!   integer :: ierr
!   call surrogate_open(s, MPI_COMM_WORLD, 'model.h5', ierr)           ! collective
!   if (ierr /= SURROGATE_OK) print *, surrogate_last_error()
!   call surrogate_set_points(s, xy, ierr)                              ! collective, once per mesh
!   do step = 1, n_steps
!     call surrogate_predict(s, xy, uvp, ierr)                          ! collective, every step
!   end do
!   call surrogate_close(s, ierr)                                       ! collective
!
! Errors. Every procedure takes a required `integer, intent(out) :: ierr`: SURROGATE_OK (0) on success,
! else one of the SURROGATE_ERR_* codes below (the C status). Nothing stops the program. Collective
! procedures (open, close, set_options, set_points, predict, vtk_open, vtk_close, vtk_write) return the
! same ierr on every rank of the communicator: a NaN in one rank's inputs or a missing model file is an
! error everywhere, nobody hangs. surrogate_last_error() gives the message of the last failure (the
! agreed message names the failing rank). Shape errors found by this module (a wrong number of
! columns, say) are also agreed on: the module hands the C library an argument it rejects on every
! rank, and the failing rank's own surrogate_last_error() explains what was wrong with its arrays.
!
! Layouts. Arrays of point values are 2-D. A solver's natural layout is points first, a(n_local, dim)
! (layout = SURROGATE_POINTS_FIRST, the default); a(dim, n_local) works with
! layout = SURROGATE_COMPONENTS_FIRST. Both give bitwise-identical results. Point arrays are not
! copied: the module passes the address of the first element and the two strides, read from the array
! itself, so sections of larger arrays (a(1:n, 1:2) of a(n_max, 3), a(1:n:2, :)) work as they are.
! real(real64) and real(real32) arrays are accepted (the model computes in float32 either way); only
! real32 points given to surrogate_vtk_write are converted (the C API writes float64 points).
!
! VTK. surrogate_vtk_add_array / surrogate_vtk_add_prediction stage arrays by address: keep them alive
! and unchanged until the next surrogate_vtk_write. Staging errors are returned at once and also make
! the next write fail on every rank.
!
! Other conventions: channel numbers are 1-based (1 .. surrogate_in_channels); VTK cell connectivity
! is 1-based by default (index_base = 0 for C numbering); ids are integer(int64). The handles are not
! thread-safe; do not copy a surrogate_t or surrogate_vtk_t by assignment (both copies would own the
! same C handle). Closing is collective, so there is no finalizer: call surrogate_close /
! surrogate_vtk_close on every rank.
!
! The raw C functions are also available as c_surrogate_* (same arguments as in surrogate.h; strings
! NUL-terminated, arrays as type(c_ptr)), except surrogate_open and surrogate_vtk_open, whose C
! MPI_Comm is not interoperable: use c_surrogate_open_f / c_surrogate_vtk_open_f with the Fortran
! handle (an integer communicator, or comm%MPI_VAL).
!
! See share/docs/fortran.md for building, linking (find_package(surrogate), target surrogate::fortran)
! and a complete example.
module surrogate
  use, intrinsic :: iso_c_binding, only: c_ptr, c_null_ptr, c_char, c_null_char, c_int, c_int8_t, c_int64_t, &
                                          c_double, c_size_t, c_intptr_t, c_loc, c_associated, c_f_pointer
  use, intrinsic :: iso_fortran_env, only: real32, real64, int8, int64
  use mpi_f08, only: MPI_Comm
  implicit none
  private

  ! --- Status codes (surrogate.h) -------------------------------------------------------------------
  integer, parameter, public :: SURROGATE_OK = 0
  integer, parameter, public :: SURROGATE_ERR_INVALID_ARGUMENT = 1 ! a wrong count, dimension, array or option
  integer, parameter, public :: SURROGATE_ERR_IO = 2               ! file missing, unreadable, not HDF5, truncated
  integer, parameter, public :: SURROGATE_ERR_FORMAT = 3           ! not a valid model file
  integer, parameter, public :: SURROGATE_ERR_WEIGHTS = 4          ! missing, mis-shaped or non-finite tensors
  integer, parameter, public :: SURROGATE_ERR_INPUT = 5            ! NaN/Inf inputs, wrong channel count, no points
  integer, parameter, public :: SURROGATE_ERR_UNSUPPORTED = 6      ! e.g. device "cuda" in a CPU build
  integer, parameter, public :: SURROGATE_ERR_COMMUNICATION = 7    ! MPI failure
  integer, parameter, public :: SURROGATE_ERR_OUT_OF_MEMORY = 8
  integer, parameter, public :: SURROGATE_ERR_INTERNAL = 9         ! a bug: please report it

  ! --- Array layouts --------------------------------------------------------------------------------
  integer, parameter, public :: SURROGATE_POINTS_FIRST = 1     ! a(n_local, components)
  integer, parameter, public :: SURROGATE_COMPONENTS_FIRST = 2 ! a(components, n_local)

  ! --- Channel kinds for surrogate_channel_name / surrogate_channel_unit ------------------------------
  integer, parameter, public :: SURROGATE_INPUT = 0
  integer, parameter, public :: SURROGATE_OUTPUT = 1

  ! --- VTK cell types (VTKCellType values) -----------------------------------------------------------
  integer, parameter, public :: SURROGATE_VTK_VERTEX = 1
  integer, parameter, public :: SURROGATE_VTK_LINE = 3
  integer, parameter, public :: SURROGATE_VTK_TRIANGLE = 5
  integer, parameter, public :: SURROGATE_VTK_POLYGON = 7
  integer, parameter, public :: SURROGATE_VTK_QUAD = 9
  integer, parameter, public :: SURROGATE_VTK_TETRA = 10
  integer, parameter, public :: SURROGATE_VTK_HEXAHEDRON = 12
  integer, parameter, public :: SURROGATE_VTK_WEDGE = 13

  ! --- VTK output formats (surrogate_vtk_open's `format`; share/docs/vtk.md) ----------------------------
  integer, parameter, public :: SURROGATE_VTK_FORMAT_VTU = 0    ! .vtu per rank, .pvtu per step, .pvd (needs VTK)
  integer, parameter, public :: SURROGATE_VTK_FORMAT_VTKHDF = 1 ! one VTKHDF file per step, .hdf.series

  ! --- Handles --------------------------------------------------------------------------------------
  !> An open surrogate model. `handle` is the C surrogate_t (for calling the c_surrogate_* functions).
  type, public :: surrogate_t
    type(c_ptr) :: handle = c_null_ptr
    integer(int64), private :: n_local = -1 ! points of the last successful set_points (-1: none yet)
    integer, private :: in_channels = 0, out_channels = 0
    character(len=:), allocatable, private :: device
    integer, private :: threads = 0
    logical, private :: reproducible = .false.
    character(len=:), allocatable, private :: precision
  end type surrogate_t

  !> A parallel VTK time series. `handle` is the C surrogate_vtk_t.
  type, public :: surrogate_vtk_t
    type(c_ptr) :: handle = c_null_ptr
  end type surrogate_vtk_t

  !> surrogate_options of the C API.
  type, bind(C), public :: c_surrogate_options
    type(c_ptr) :: device = c_null_ptr
    integer(c_int) :: threads = 0
    integer(c_int) :: reproducible = 0
    type(c_ptr) :: precision = c_null_ptr  ! NULL: "fp32"
    integer(c_int) :: allow_non_finite_output = 0  ! 0: NaN/Inf predictions are an error (not exposed)
  end type c_surrogate_options

  ! --- The C API ------------------------------------------------------------------------------------
  public :: c_surrogate_options_default, c_surrogate_open_f, c_surrogate_close, c_surrogate_set_options
  public :: c_surrogate_set_points_f64, c_surrogate_set_points_f32, c_surrogate_predict_f64, c_surrogate_predict_f32
  public :: c_surrogate_set_edges, c_surrogate_position_dim
  public :: c_surrogate_in_channels, c_surrogate_out_channels, c_surrogate_channel_name, c_surrogate_channel_unit
  public :: c_surrogate_architecture, c_surrogate_last_predict_seconds
  public :: c_surrogate_sample_channels, c_surrogate_samples, c_surrogate_set_sample_inputs_f64
  public :: c_surrogate_get_sample_outputs_f64
  public :: c_surrogate_vtk_open_f, c_surrogate_vtk_open_format_f, c_surrogate_vtk_close, c_surrogate_vtk_set_cells
  public :: c_surrogate_vtk_add_array_f64, c_surrogate_vtk_add_array_f32, c_surrogate_vtk_add_prediction_f64
  public :: c_surrogate_vtk_write, c_surrogate_vtk_write_points_of
  public :: c_surrogate_last_error, c_surrogate_status_string, c_surrogate_version

  interface
    subroutine c_surrogate_options_default(options) bind(C, name="surrogate_options_default")
      import :: c_surrogate_options
      type(c_surrogate_options), intent(out) :: options
    end subroutine c_surrogate_options_default

    !> options: c_loc of a c_surrogate_options, or c_null_ptr for the defaults.
    integer(c_int) function c_surrogate_open_f(comm, model_path, options, handle) bind(C, name="surrogate_open_f")
      import :: c_int, c_char, c_ptr
      integer(c_int), value :: comm
      character(kind=c_char), intent(in) :: model_path(*)
      type(c_ptr), value :: options
      type(c_ptr), intent(out) :: handle
    end function c_surrogate_open_f

    integer(c_int) function c_surrogate_close(handle) bind(C, name="surrogate_close")
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: handle
    end function c_surrogate_close

    integer(c_int) function c_surrogate_set_options(handle, options) bind(C, name="surrogate_set_options")
      import :: c_int, c_ptr
      type(c_ptr), value :: handle, options
    end function c_surrogate_set_options

    integer(c_int) function c_surrogate_set_points_f64(handle, n_local, dim, coords, point_stride, dim_stride, &
                                                       global_ids, sample_ids) bind(C, name="surrogate_set_points_f64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: n_local
      integer(c_int), value :: dim
      type(c_ptr), value :: coords
      integer(c_int64_t), value :: point_stride, dim_stride
      type(c_ptr), value :: global_ids, sample_ids
    end function c_surrogate_set_points_f64

    integer(c_int) function c_surrogate_set_points_f32(handle, n_local, dim, coords, point_stride, dim_stride, &
                                                       global_ids, sample_ids) bind(C, name="surrogate_set_points_f32")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: n_local
      integer(c_int), value :: dim
      type(c_ptr), value :: coords
      integer(c_int64_t), value :: point_stride, dim_stride
      type(c_ptr), value :: global_ids, sample_ids
    end function c_surrogate_set_points_f32

    integer(c_int) function c_surrogate_set_edges(handle, n_edges, sources, receivers) &
        bind(C, name="surrogate_set_edges")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: n_edges
      type(c_ptr), value :: sources, receivers
    end function c_surrogate_set_edges

    integer(c_int) function c_surrogate_position_dim(handle, dim) bind(C, name="surrogate_position_dim")
      import :: c_int, c_ptr
      type(c_ptr), value :: handle
      integer(c_int), intent(out) :: dim
    end function c_surrogate_position_dim

    integer(c_int) function c_surrogate_predict_f64(handle, in, in_point_stride, in_channel_stride, &
                                                    out, out_point_stride, out_channel_stride) &
        bind(C, name="surrogate_predict_f64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: handle, in
      integer(c_int64_t), value :: in_point_stride, in_channel_stride
      type(c_ptr), value :: out
      integer(c_int64_t), value :: out_point_stride, out_channel_stride
    end function c_surrogate_predict_f64

    integer(c_int) function c_surrogate_predict_f32(handle, in, in_point_stride, in_channel_stride, &
                                                    out, out_point_stride, out_channel_stride) &
        bind(C, name="surrogate_predict_f32")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: handle, in
      integer(c_int64_t), value :: in_point_stride, in_channel_stride
      type(c_ptr), value :: out
      integer(c_int64_t), value :: out_point_stride, out_channel_stride
    end function c_surrogate_predict_f32

    integer(c_int) function c_surrogate_in_channels(handle, channels) bind(C, name="surrogate_in_channels")
      import :: c_int, c_ptr
      type(c_ptr), value :: handle
      integer(c_int), intent(out) :: channels
    end function c_surrogate_in_channels

    integer(c_int) function c_surrogate_out_channels(handle, channels) bind(C, name="surrogate_out_channels")
      import :: c_int, c_ptr
      type(c_ptr), value :: handle
      integer(c_int), intent(out) :: channels
    end function c_surrogate_out_channels

    !> channel is 0-based here, as in C.
    integer(c_int) function c_surrogate_channel_name(handle, output, channel, buffer, size) &
        bind(C, name="surrogate_channel_name")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: handle
      integer(c_int), value :: output, channel
      character(kind=c_char), intent(out) :: buffer(*)
      integer(c_size_t), value :: size
    end function c_surrogate_channel_name

    integer(c_int) function c_surrogate_channel_unit(handle, output, channel, buffer, size) &
        bind(C, name="surrogate_channel_unit")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: handle
      integer(c_int), value :: output, channel
      character(kind=c_char), intent(out) :: buffer(*)
      integer(c_size_t), value :: size
    end function c_surrogate_channel_unit

    integer(c_int) function c_surrogate_architecture(handle, buffer, size) bind(C, name="surrogate_architecture")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: handle
      character(kind=c_char), intent(out) :: buffer(*)
      integer(c_size_t), value :: size
    end function c_surrogate_architecture

    integer(c_int) function c_surrogate_sample_channels(handle, sample_in, sample_out) &
        bind(C, name="surrogate_sample_channels")
      import :: c_int, c_ptr
      type(c_ptr), value :: handle
      integer(c_int), intent(out) :: sample_in, sample_out
    end function c_surrogate_sample_channels

    integer(c_int) function c_surrogate_samples(handle, samples) bind(C, name="surrogate_samples")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: handle
      integer(c_int64_t), intent(out) :: samples
    end function c_surrogate_samples

    integer(c_int) function c_surrogate_set_sample_inputs_f64(handle, samples, channels, values) &
        bind(C, name="surrogate_set_sample_inputs_f64")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: samples
      integer(c_int), value :: channels
      type(c_ptr), value :: values
    end function c_surrogate_set_sample_inputs_f64

    integer(c_int) function c_surrogate_get_sample_outputs_f64(handle, capacity, values) &
        bind(C, name="surrogate_get_sample_outputs_f64")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: capacity
      type(c_ptr), value :: values
    end function c_surrogate_get_sample_outputs_f64

    integer(c_int) function c_surrogate_last_predict_seconds(handle, seconds) &
        bind(C, name="surrogate_last_predict_seconds")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: handle
      real(c_double), intent(out) :: seconds
    end function c_surrogate_last_predict_seconds

    integer(c_int) function c_surrogate_vtk_open_f(comm, directory, name, vtk) bind(C, name="surrogate_vtk_open_f")
      import :: c_int, c_char, c_ptr
      integer(c_int), value :: comm
      character(kind=c_char), intent(in) :: directory(*), name(*)
      type(c_ptr), intent(out) :: vtk
    end function c_surrogate_vtk_open_f

    integer(c_int) function c_surrogate_vtk_open_format_f(comm, directory, name, format, vtk) &
        bind(C, name="surrogate_vtk_open_format_f")
      import :: c_int, c_char, c_ptr
      integer(c_int), value :: comm, format
      character(kind=c_char), intent(in) :: directory(*), name(*)
      type(c_ptr), intent(out) :: vtk
    end function c_surrogate_vtk_open_format_f

    integer(c_int) function c_surrogate_vtk_close(vtk) bind(C, name="surrogate_vtk_close")
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: vtk
    end function c_surrogate_vtk_close

    integer(c_int) function c_surrogate_vtk_set_cells(vtk, n_cells, connectivity, offsets, types) &
        bind(C, name="surrogate_vtk_set_cells")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: vtk
      integer(c_int64_t), value :: n_cells
      type(c_ptr), value :: connectivity, offsets, types
    end function c_surrogate_vtk_set_cells

    !> unit: c_loc of a NUL-terminated string or c_null_ptr.
    integer(c_int) function c_surrogate_vtk_add_array_f64(vtk, name, unit, components, values, point_stride, &
                                                          component_stride) bind(C, name="surrogate_vtk_add_array_f64")
      import :: c_int, c_int64_t, c_ptr, c_char
      type(c_ptr), value :: vtk
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: unit
      integer(c_int), value :: components
      type(c_ptr), value :: values
      integer(c_int64_t), value :: point_stride, component_stride
    end function c_surrogate_vtk_add_array_f64

    integer(c_int) function c_surrogate_vtk_add_array_f32(vtk, name, unit, components, values, point_stride, &
                                                          component_stride) bind(C, name="surrogate_vtk_add_array_f32")
      import :: c_int, c_int64_t, c_ptr, c_char
      type(c_ptr), value :: vtk
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: unit
      integer(c_int), value :: components
      type(c_ptr), value :: values
      integer(c_int64_t), value :: point_stride, component_stride
    end function c_surrogate_vtk_add_array_f32

    !> prefix: c_loc of a NUL-terminated string or c_null_ptr.
    integer(c_int) function c_surrogate_vtk_add_prediction_f64(vtk, handle, prediction, point_stride, channel_stride, &
                                                               prefix) bind(C, name="surrogate_vtk_add_prediction_f64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: vtk, handle, prediction
      integer(c_int64_t), value :: point_stride, channel_stride
      type(c_ptr), value :: prefix
    end function c_surrogate_vtk_add_prediction_f64

    !> step: c_loc of an integer(c_int) or c_null_ptr.
    integer(c_int) function c_surrogate_vtk_write(vtk, time, n_local, dim, coords, point_stride, dim_stride, step) &
        bind(C, name="surrogate_vtk_write")
      import :: c_int, c_int64_t, c_ptr, c_double
      type(c_ptr), value :: vtk
      real(c_double), value :: time
      integer(c_int64_t), value :: n_local
      integer(c_int), value :: dim
      type(c_ptr), value :: coords
      integer(c_int64_t), value :: point_stride, dim_stride
      type(c_ptr), value :: step
    end function c_surrogate_vtk_write

    integer(c_int) function c_surrogate_vtk_write_points_of(vtk, time, handle, step) &
        bind(C, name="surrogate_vtk_write_points_of")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: vtk
      real(c_double), value :: time
      type(c_ptr), value :: handle, step
    end function c_surrogate_vtk_write_points_of

    type(c_ptr) function c_surrogate_last_error() bind(C, name="surrogate_last_error")
      import :: c_ptr
    end function c_surrogate_last_error

    type(c_ptr) function c_surrogate_status_string(status) bind(C, name="surrogate_status_string")
      import :: c_ptr, c_int
      integer(c_int), value :: status
    end function c_surrogate_status_string

    type(c_ptr) function c_surrogate_version() bind(C, name="surrogate_version")
      import :: c_ptr
    end function c_surrogate_version

    integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function c_strlen
  end interface

  ! --- The Fortran interface ------------------------------------------------------------------------
  public :: surrogate_open, surrogate_close, surrogate_set_options, surrogate_set_points, surrogate_predict
  public :: surrogate_set_edges, surrogate_position_dim
  public :: surrogate_is_open, surrogate_in_channels, surrogate_out_channels, surrogate_channel_name
  public :: surrogate_channel_unit, surrogate_architecture, surrogate_last_predict_seconds
  public :: surrogate_sample_in_channels, surrogate_sample_out_channels, surrogate_samples
  public :: surrogate_set_sample_inputs, surrogate_get_sample_outputs
  public :: surrogate_last_error, surrogate_status_string, surrogate_version
  public :: surrogate_vtk_open, surrogate_vtk_close, surrogate_vtk_set_cells, surrogate_vtk_add_array
  public :: surrogate_vtk_add_prediction, surrogate_vtk_write

  !> call surrogate_open(s, comm, model_path, ierr [, device, threads, reproducible, precision])
  !> comm: type(MPI_Comm) (mpi_f08) or integer (use mpi). device: 'cpu' (default), 'cuda', 'cuda:N'
  !> or 'cuda-emulated' (the CUDA kernels on the CPU, for tests)
  !> (builds without the CUDA backend refuse those); threads: OpenMP threads per rank, 0 =
  !> OMP_NUM_THREADS (default); reproducible: bitwise-identical results for any rank count and
  !> partition (default .false.); precision: 'fp32' (default), 'tf32' (CUDA devices), 'bf16' (CUDA
  !> devices; CPUs with AMX-BF16 / AVX512-BF16 for flare models) or 'fp64' (double precision on the
  !> CPU, for the families that offer it). Collective.
  interface surrogate_open
    module procedure open_f08, open_integer
  end interface surrogate_open

  !> call surrogate_set_points(s, coords, ierr [, global_ids, sample_ids, layout])
  !> coords: real(real64) or real(real32), coords(n_local, dim) or (with layout =
  !> SURROGATE_COMPONENTS_FIRST) coords(dim, n_local). Collective.
  interface surrogate_set_points
    module procedure set_points_f64, set_points_f32
  end interface surrogate_set_points

  !> call surrogate_predict(s, inputs, outputs, ierr [, layout])
  !> inputs(n_local, in_channels), outputs(n_local, out_channels), both real64 or both real32 (or both
  !> transposed with layout = SURROGATE_COMPONENTS_FIRST). Collective.
  interface surrogate_predict
    module procedure predict_f64, predict_f32
  end interface surrogate_predict

  !> call surrogate_vtk_open(vtk, comm, directory, name, ierr [, format]). Collective. format:
  !> SURROGATE_VTK_FORMAT_VTU (default) or SURROGATE_VTK_FORMAT_VTKHDF, the same on every rank.
  interface surrogate_vtk_open
    module procedure vtk_open_f08, vtk_open_integer
  end interface surrogate_vtk_open

  !> call surrogate_vtk_set_cells(vtk, connectivity, offsets, types, ierr [, index_base])
  !> connectivity, offsets: integer or integer(int64); types: integer or integer(int8) (SURROGATE_VTK_*).
  interface surrogate_vtk_set_cells
    module procedure vtk_set_cells_i64_i8, vtk_set_cells_i64_int, vtk_set_cells_int_i8, vtk_set_cells_int_int
  end interface surrogate_vtk_set_cells

  !> call surrogate_vtk_add_array(vtk, name, values, ierr [, unit, layout])
  !> values: real64 or real32, 1-D (a scalar per point) or 2-D (values(n_local, components)).
  interface surrogate_vtk_add_array
    module procedure vtk_add_array_f64_2d, vtk_add_array_f32_2d, vtk_add_array_f64_1d, vtk_add_array_f32_1d
  end interface surrogate_vtk_add_array

  !> call surrogate_vtk_add_prediction(vtk, s, prediction, ierr [, prefix, layout])
  interface surrogate_vtk_add_prediction
    module procedure vtk_add_prediction_f64, vtk_add_prediction_f32
  end interface surrogate_vtk_add_prediction

  !> call surrogate_vtk_write(vtk, time, coords, ierr [, step, layout])   (coords real64 or real32)
  !> call surrogate_vtk_write(vtk, time, s, ierr [, step])                 (the points of set_points)
  !> Collective.
  interface surrogate_vtk_write
    module procedure vtk_write_f64, vtk_write_f32, vtk_write_points_of
  end interface surrogate_vtk_write

  !> A 2-D array seen as points x components: first element, sizes and strides (in elements).
  type :: view_t
    type(c_ptr) :: data = c_null_ptr
    integer(int64) :: points = 0, components = 0, point_stride = 1, component_stride = 1
  end type view_t

  ! The last failure found by this module itself (reported by surrogate_last_error while active).
  character(len=:), allocatable, save :: module_message
  logical, save :: module_message_active = .false.

contains

  ! =================================================================================================
  ! Helpers
  ! =================================================================================================

  !> A NUL-terminated copy of a Fortran string.
  pure function c_string(text) result(buffer)
    character(len=*), intent(in) :: text
    character(kind=c_char), allocatable :: buffer(:)
    integer :: i
    allocate (buffer(len(text) + 1))
    do i = 1, len(text)
      buffer(i) = text(i:i)
    end do
    buffer(len(text) + 1) = c_null_char
  end function c_string

  !> A Fortran copy of a NUL-terminated C string ("" for a null pointer).
  function fortran_string(p) result(text)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      text = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: text)
    do i = 1, n
      text(i:i) = chars(i)
    end do
  end function fortran_string

  !> The Fortran string in a NUL-terminated buffer.
  function buffer_string(buffer) result(text)
    character(kind=c_char), intent(in) :: buffer(:)
    character(len=:), allocatable :: text
    integer :: i, n
    n = 0
    do while (n < size(buffer))
      if (buffer(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate (character(len=n) :: text)
    do i = 1, n
      text(i:i) = buffer(i)
    end do
  end function buffer_string

  integer(c_intptr_t) function address(p)
    type(c_ptr), intent(in) :: p
    address = transfer(p, address)
  end function address

  !> Records a failure found by this module; surrogate_last_error() reports it until the next failure.
  subroutine module_error(message)
    character(len=*), intent(in) :: message
    module_message = message
    module_message_active = .true.
  end subroutine module_error

  !> The status of a C call: a failure there replaces any message of this module.
  integer function c_status(rc)
    integer(c_int), intent(in) :: rc
    c_status = int(rc)
    if (rc /= 0) module_message_active = .false.
  end function c_status

  !> The status of a collective C call made with a deliberately invalid argument because this rank's
  !> arrays were wrong (`problem`): every rank got the library's agreed error; this rank reports why.
  integer function forced_status(rc, problem)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: problem
    forced_status = int(rc)
    if (rc == 0) forced_status = SURROGATE_ERR_INVALID_ARGUMENT
    call module_error(problem)
  end function forced_status

  logical function valid_layout(layout)
    integer, intent(in) :: layout
    valid_layout = layout == SURROGATE_POINTS_FIRST .or. layout == SURROGATE_COMPONENTS_FIRST
  end function valid_layout

  integer function layout_or_default(layout)
    integer, intent(in), optional :: layout
    layout_or_default = SURROGATE_POINTS_FIRST
    if (present(layout)) layout_or_default = layout
  end function layout_or_default

  function layout_name(layout) result(name)
    integer, intent(in) :: layout
    character(len=:), allocatable :: name
    select case (layout)
    case (SURROGATE_POINTS_FIRST)
      name = 'SURROGATE_POINTS_FIRST: a(n_local, components)'
    case (SURROGATE_COMPONENTS_FIRST)
      name = 'SURROGATE_COMPONENTS_FIRST: a(components, n_local)'
    case default
      name = 'unknown layout'
    end select
  end function layout_name

  function itoa(i) result(text)
    integer(int64), intent(in) :: i
    character(len=:), allocatable :: text
    character(len=24) :: buffer
    write (buffer, '(i0)') i
    text = trim(buffer)
  end function itoa

  function bad_layout_message(where, layout) result(text)
    character(len=*), intent(in) :: where
    integer, intent(in) :: layout
    character(len=:), allocatable :: text
    text = where//': layout '//itoa(int(layout, int64))// &
           ' is neither SURROGATE_POINTS_FIRST (1) nor SURROGATE_COMPONENTS_FIRST (2)'
  end function bad_layout_message

  !> The view of a 2-D array of extents (n1, n2) from the addresses of its elements (1,1), (2,1) and
  !> (1,2) (null where the array has no such element). The strides come from the addresses, so any
  !> section is seen without a copy.
  function make_view(n1, n2, p11, p21, p12, bytes, layout) result(v)
    integer, intent(in) :: n1, n2, bytes, layout
    type(c_ptr), intent(in) :: p11, p21, p12
    type(view_t) :: v
    integer(int64) :: s1, s2
    s1 = 1
    s2 = max(n1, 1)
    if (c_associated(p21)) s1 = (address(p21) - address(p11)) / bytes
    if (c_associated(p12)) s2 = (address(p12) - address(p11)) / bytes
    v%data = p11
    if (layout == SURROGATE_COMPONENTS_FIRST) then
      v%points = n2
      v%components = n1
      v%point_stride = s2
      v%component_stride = s1
    else
      v%points = n1
      v%components = n2
      v%point_stride = s1
      v%component_stride = s2
    end if
    if (v%points == 0 .or. v%components == 0) v%data = c_null_ptr
  end function make_view

  function view_f64(a, layout) result(v)
    real(real64), intent(in), target :: a(:, :)
    integer, intent(in) :: layout
    type(view_t) :: v
    type(c_ptr) :: p11, p21, p12
    p11 = c_null_ptr
    p21 = c_null_ptr
    p12 = c_null_ptr
    if (size(a) > 0) then
      p11 = c_loc(a(1, 1))
      if (size(a, 1) > 1) p21 = c_loc(a(2, 1))
      if (size(a, 2) > 1) p12 = c_loc(a(1, 2))
    end if
    v = make_view(size(a, 1), size(a, 2), p11, p21, p12, storage_size(a) / 8, layout)
  end function view_f64

  function view_f32(a, layout) result(v)
    real(real32), intent(in), target :: a(:, :)
    integer, intent(in) :: layout
    type(view_t) :: v
    type(c_ptr) :: p11, p21, p12
    p11 = c_null_ptr
    p21 = c_null_ptr
    p12 = c_null_ptr
    if (size(a) > 0) then
      p11 = c_loc(a(1, 1))
      if (size(a, 1) > 1) p21 = c_loc(a(2, 1))
      if (size(a, 2) > 1) p12 = c_loc(a(1, 2))
    end if
    v = make_view(size(a, 1), size(a, 2), p11, p21, p12, storage_size(a) / 8, layout)
  end function view_f32

  !> The view of a 1-D array as n points x 1 component.
  function view_1d(n, p1, p2, bytes) result(v)
    integer, intent(in) :: n, bytes
    type(c_ptr), intent(in) :: p1, p2
    type(view_t) :: v
    v%points = n
    v%components = 1
    v%data = p1
    if (c_associated(p2)) v%point_stride = (address(p2) - address(p1)) / bytes
    v%component_stride = 1
    if (n == 0) v%data = c_null_ptr
  end function view_1d

  !> c_loc of a contiguous int64 array (null if empty).
  type(c_ptr) function ids_pointer(ids)
    integer(int64), intent(in), target, contiguous :: ids(:)
    ids_pointer = c_null_ptr
    if (size(ids) > 0) ids_pointer = c_loc(ids)
  end function ids_pointer

  !> Checks an array of point values against the expected sizes; "" if it fits.
  function shape_problem(where, what, v, points, components, layout) result(problem)
    character(len=*), intent(in) :: where, what
    type(view_t), intent(in) :: v
    integer(int64), intent(in) :: points, components
    integer, intent(in) :: layout
    character(len=:), allocatable :: problem
    problem = ''
    if (v%points /= points .or. v%components /= components) &
      problem = where//': '//what//' is '//itoa(v%points)//' points x '//itoa(v%components)// &
                ' components, expected '//itoa(points)//' x '//itoa(components)//' (layout '// &
                layout_name(layout)//')'
  end function shape_problem

  ! =================================================================================================
  ! Open, close, options
  ! =================================================================================================

  subroutine open_f08(s, comm, model_path, ierr, device, threads, reproducible, precision)
    type(surrogate_t), intent(inout) :: s
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: model_path
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: device
    integer, intent(in), optional :: threads
    logical, intent(in), optional :: reproducible
    character(len=*), intent(in), optional :: precision
    call open_integer(s, comm%MPI_VAL, model_path, ierr, device, threads, reproducible, precision)
  end subroutine open_f08

  subroutine open_integer(s, comm, model_path, ierr, device, threads, reproducible, precision)
    type(surrogate_t), intent(inout) :: s
    integer, intent(in) :: comm
    character(len=*), intent(in) :: model_path
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: device
    integer, intent(in), optional :: threads
    logical, intent(in), optional :: reproducible
    character(len=*), intent(in), optional :: precision
    type(c_surrogate_options), target :: options
    character(kind=c_char), allocatable, target :: c_device(:), c_precision(:)
    type(c_ptr) :: handle
    integer(c_int) :: rc, channels
    logical :: already_open

    s%device = 'cpu'
    if (present(device)) s%device = trim(device)
    s%threads = 0
    if (present(threads)) s%threads = threads
    s%reproducible = .false.
    if (present(reproducible)) s%reproducible = reproducible
    s%precision = 'fp32'
    if (present(precision)) s%precision = trim(precision)
    call c_surrogate_options_default(options)
    allocate (c_device(len(s%device) + 1)) ! (explicit: gfortran 12 warns about allocation on assignment)
    c_device = c_string(s%device)
    options%device = c_loc(c_device)
    allocate (c_precision(len(s%precision) + 1))
    c_precision = c_string(s%precision)
    options%precision = c_loc(c_precision)
    options%threads = int(s%threads, c_int)
    options%reproducible = merge(1_c_int, 0_c_int, s%reproducible)

    ! Opening over an open handle would leak it: fail on every rank (an invalid thread count is an
    ! error the library agrees on).
    already_open = c_associated(s%handle)
    if (already_open) options%threads = -1_c_int
    handle = c_null_ptr
    rc = c_surrogate_open_f(int(comm, c_int), c_string(model_path), c_loc(options), handle)
    if (already_open) then
      ierr = forced_status(rc, 'surrogate_open: this surrogate_t is already open; close it first')
      return
    end if
    ierr = c_status(rc)
    s%handle = handle
    s%n_local = -1
    if (ierr /= SURROGATE_OK) return
    rc = c_surrogate_in_channels(s%handle, channels)
    s%in_channels = int(channels)
    rc = c_surrogate_out_channels(s%handle, channels)
    s%out_channels = int(channels)
  end subroutine open_integer

  !> Collective. Closes the model (a surrogate_t that is not open is a no-op).
  subroutine surrogate_close(s, ierr)
    type(surrogate_t), intent(inout) :: s
    integer, intent(out) :: ierr
    ierr = c_status(c_surrogate_close(s%handle))
    s%handle = c_null_ptr
    s%n_local = -1
    s%in_channels = 0
    s%out_channels = 0
  end subroutine surrogate_close

  !> Collective. Changes the options given; the others keep their values.
  subroutine surrogate_set_options(s, ierr, device, threads, reproducible, precision)
    type(surrogate_t), intent(inout) :: s
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: device
    integer, intent(in), optional :: threads
    logical, intent(in), optional :: reproducible
    character(len=*), intent(in), optional :: precision
    type(c_surrogate_options), target :: options
    character(kind=c_char), allocatable, target :: c_device(:), c_precision(:)
    character(len=:), allocatable :: new_device, new_precision
    integer :: new_threads
    logical :: new_reproducible
    new_device = 'cpu'
    if (allocated(s%device)) new_device = s%device
    if (present(device)) new_device = trim(device)
    new_threads = s%threads
    if (present(threads)) new_threads = threads
    new_reproducible = s%reproducible
    if (present(reproducible)) new_reproducible = reproducible
    new_precision = 'fp32'
    if (allocated(s%precision)) new_precision = s%precision
    if (present(precision)) new_precision = trim(precision)
    call c_surrogate_options_default(options)
    allocate (c_device(len(new_device) + 1))
    c_device = c_string(new_device)
    options%device = c_loc(c_device)
    allocate (c_precision(len(new_precision) + 1))
    c_precision = c_string(new_precision)
    options%precision = c_loc(c_precision)
    options%threads = int(new_threads, c_int)
    options%reproducible = merge(1_c_int, 0_c_int, new_reproducible)
    ierr = c_status(c_surrogate_set_options(s%handle, c_loc(options)))
    if (ierr /= SURROGATE_OK) return
    s%device = new_device
    s%threads = new_threads
    s%reproducible = new_reproducible
    s%precision = new_precision
  end subroutine surrogate_set_options

  ! =================================================================================================
  ! Points and predictions
  ! =================================================================================================

  subroutine set_points_f64(s, coords, ierr, global_ids, sample_ids, layout)
    type(surrogate_t), intent(inout) :: s
    real(real64), intent(in), target :: coords(:, :)
    integer, intent(out) :: ierr
    integer(int64), intent(in), target, contiguous, optional :: global_ids(:), sample_ids(:)
    integer, intent(in), optional :: layout
    type(view_t) :: v
    integer :: lay
    lay = layout_or_default(layout)
    if (valid_layout(lay)) then
      v = view_f64(coords, lay)
    else
      v%components = 1
    end if
    call set_points_common(s, v, lay, .true., ierr, global_ids, sample_ids)
  end subroutine set_points_f64

  subroutine set_points_f32(s, coords, ierr, global_ids, sample_ids, layout)
    type(surrogate_t), intent(inout) :: s
    real(real32), intent(in), target :: coords(:, :)
    integer, intent(out) :: ierr
    integer(int64), intent(in), target, contiguous, optional :: global_ids(:), sample_ids(:)
    integer, intent(in), optional :: layout
    type(view_t) :: v
    integer :: lay
    lay = layout_or_default(layout)
    if (valid_layout(lay)) then
      v = view_f32(coords, lay)
    else
      v%components = 1
    end if
    call set_points_common(s, v, lay, .false., ierr, global_ids, sample_ids)
  end subroutine set_points_f32

  !> call surrogate_set_edges(s, sources, receivers, ierr). Collective. Graph edges for models that pass
  !> messages (Erwin): this rank's share, sources(e) -> receivers(e), as global point ids: the global_ids
  !> given to surrogate_set_points (used as given), or without them the rank-major numbering starting at
  !> 0. The graph is the union over the ranks in rank order; a rank may give none (zero-size arrays).
  !> Kept until the next set_points or set_edges; zero-size arrays on every rank remove the edges (the
  !> model then builds its graph by the rule of its file, if any). Other models ignore the edges.
  subroutine surrogate_set_edges(s, sources, receivers, ierr)
    type(surrogate_t), intent(inout) :: s
    integer(int64), intent(in), target, contiguous :: sources(:), receivers(:)
    integer, intent(out) :: ierr
    integer(c_int) :: rc
    if (size(sources, kind=int64) /= size(receivers, kind=int64)) then
      ! n_edges = -1 is rejected by the library on every rank; this rank reports why.
      rc = c_surrogate_set_edges(s%handle, -1_c_int64_t, c_null_ptr, c_null_ptr)
      ierr = forced_status(rc, 'surrogate_set_edges: sources has '//itoa(size(sources, kind=int64))// &
                           ' entries, receivers '//itoa(size(receivers, kind=int64)))
      return
    end if
    rc = c_surrogate_set_edges(s%handle, int(size(sources, kind=int64), c_int64_t), ids_pointer(sources), &
                               ids_pointer(receivers))
    ierr = c_status(rc)
  end subroutine surrogate_set_edges

  !> n = surrogate_position_dim(s, ierr): coordinates per point the model needs as positions
  !> (surrogate_set_points' dim), 0 for models that need none (FLARE, spherical models).
  integer function surrogate_position_dim(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer(c_int) :: dim
    dim = 0
    ierr = c_status(c_surrogate_position_dim(s%handle, dim))
    surrogate_position_dim = int(dim)
  end function surrogate_position_dim

  subroutine set_points_common(s, v, layout, double, ierr, global_ids, sample_ids)
    type(surrogate_t), intent(inout) :: s
    type(view_t), intent(in) :: v
    integer, intent(in) :: layout
    logical, intent(in) :: double
    integer, intent(out) :: ierr
    integer(int64), intent(in), target, contiguous, optional :: global_ids(:), sample_ids(:)
    character(len=:), allocatable :: problem
    type(c_ptr) :: gid, sid
    integer(c_int64_t) :: n
    integer(c_int) :: rc
    problem = ''
    gid = c_null_ptr
    sid = c_null_ptr
    if (.not. valid_layout(layout)) problem = bad_layout_message('surrogate_set_points', layout)
    if (present(global_ids)) then
      if (size(global_ids, kind=int64) /= v%points .and. problem == '') &
        problem = 'surrogate_set_points: global_ids has '//itoa(size(global_ids, kind=int64))// &
                  ' entries for '//itoa(v%points)//' points'
      gid = ids_pointer(global_ids)
    end if
    if (present(sample_ids)) then
      if (size(sample_ids, kind=int64) /= v%points .and. problem == '') &
        problem = 'surrogate_set_points: sample_ids has '//itoa(size(sample_ids, kind=int64))// &
                  ' entries for '//itoa(v%points)//' points'
      sid = ids_pointer(sample_ids)
    end if
    n = v%points
    if (problem /= '') n = -1 ! rejected by the library on every rank
    if (double) then
      rc = c_surrogate_set_points_f64(s%handle, n, int(v%components, c_int), v%data, v%point_stride, &
                                      v%component_stride, gid, sid)
    else
      rc = c_surrogate_set_points_f32(s%handle, n, int(v%components, c_int), v%data, v%point_stride, &
                                      v%component_stride, gid, sid)
    end if
    if (problem /= '') then
      ierr = forced_status(rc, problem)
      return
    end if
    ierr = c_status(rc)
    if (ierr == SURROGATE_OK) s%n_local = v%points
  end subroutine set_points_common

  subroutine predict_f64(s, inputs, outputs, ierr, layout)
    type(surrogate_t), intent(inout) :: s
    real(real64), intent(in), target :: inputs(:, :)
    real(real64), intent(inout), target :: outputs(:, :)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: layout
    type(view_t) :: vin, vout
    integer :: lay
    lay = layout_or_default(layout)
    if (valid_layout(lay)) then
      vin = view_f64(inputs, lay)
      vout = view_f64(outputs, lay)
    end if
    call predict_common(s, vin, vout, lay, .true., ierr)
  end subroutine predict_f64

  subroutine predict_f32(s, inputs, outputs, ierr, layout)
    type(surrogate_t), intent(inout) :: s
    real(real32), intent(in), target :: inputs(:, :)
    real(real32), intent(inout), target :: outputs(:, :)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: layout
    type(view_t) :: vin, vout
    integer :: lay
    lay = layout_or_default(layout)
    if (valid_layout(lay)) then
      vin = view_f32(inputs, lay)
      vout = view_f32(outputs, lay)
    end if
    call predict_common(s, vin, vout, lay, .false., ierr)
  end subroutine predict_f32

  subroutine predict_common(s, vin, vout, layout, double, ierr)
    type(surrogate_t), intent(inout) :: s
    type(view_t), intent(in) :: vin, vout
    integer, intent(in) :: layout
    logical, intent(in) :: double
    integer, intent(out) :: ierr
    character(len=:), allocatable :: problem
    type(c_ptr) :: pin, pout
    integer(c_int) :: rc
    problem = ''
    ! A rank without points has nothing to read or write; before set_points the library reports it.
    if (s%n_local > 0) then
      if (.not. valid_layout(layout)) then
        problem = bad_layout_message('surrogate_predict', layout)
      else
        problem = shape_problem('surrogate_predict', 'inputs', vin, s%n_local, int(s%in_channels, int64), layout)
        if (problem == '') problem = shape_problem('surrogate_predict', 'outputs', vout, s%n_local, &
                                                   int(s%out_channels, int64), layout)
      end if
    end if
    pin = vin%data
    pout = vout%data
    if (problem /= '') then ! null arrays on a rank with points: rejected by the library on every rank
      pin = c_null_ptr
      pout = c_null_ptr
    end if
    if (double) then
      rc = c_surrogate_predict_f64(s%handle, pin, vin%point_stride, vin%component_stride, &
                                   pout, vout%point_stride, vout%component_stride)
    else
      rc = c_surrogate_predict_f32(s%handle, pin, vin%point_stride, vin%component_stride, &
                                   pout, vout%point_stride, vout%component_stride)
    end if
    if (problem /= '') then
      ierr = forced_status(rc, problem)
    else
      ierr = c_status(rc)
    end if
  end subroutine predict_common

  ! =================================================================================================
  ! Queries (local)
  ! =================================================================================================

  !> Per-sample values (share/docs/fortran.md, "Per-sample inputs and outputs"): values per sample the
  !> model takes besides the per-point inputs, and values per sample it outputs (one row per sample).
  integer function surrogate_sample_in_channels(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer(c_int) :: sin, sout
    sin = 0
    sout = 0
    ierr = c_status(c_surrogate_sample_channels(s%handle, sin, sout))
    surrogate_sample_in_channels = int(sin)
  end function surrogate_sample_in_channels

  integer function surrogate_sample_out_channels(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer(c_int) :: sin, sout
    sin = 0
    sout = 0
    ierr = c_status(c_surrogate_sample_channels(s%handle, sin, sout))
    surrogate_sample_out_channels = int(sout)
  end function surrogate_sample_out_channels

  !> Samples B of the current points (0 before set_points).
  integer(int64) function surrogate_samples(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer(c_int64_t) :: b
    b = 0
    ierr = c_status(c_surrogate_samples(s%handle, b))
    surrogate_samples = int(b, int64)
  end function surrogate_samples

  !> call surrogate_set_sample_inputs(s, values, ierr [, layout]): values(n_samples, channels) (or
  !> values(channels, n_samples) with layout = SURROGATE_COMPONENTS_FIRST), real64, the same on every
  !> rank; kept for the following predicts, which check them. Local.
  subroutine surrogate_set_sample_inputs(s, values, ierr, layout)
    type(surrogate_t), intent(inout) :: s
    real(real64), intent(in) :: values(:, :)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: layout
    real(real64), allocatable, target :: rows(:, :)  ! (channels, samples): sample-major as in C
    integer :: lay
    lay = layout_or_default(layout)
    if (lay == SURROGATE_COMPONENTS_FIRST) then
      rows = values
    else
      rows = transpose(values)
    end if
    ierr = c_status(c_surrogate_set_sample_inputs_f64(s%handle, int(size(rows, 2), c_int64_t), &
                                                      int(size(rows, 1), c_int), c_loc(rows)))
  end subroutine surrogate_set_sample_inputs

  !> call surrogate_get_sample_outputs(s, values, ierr [, layout]): the last predict's per-sample outputs
  !> into values(n_samples, sample_out_channels) (or transposed with layout = SURROGATE_COMPONENTS_FIRST),
  !> the same on every rank. Local.
  subroutine surrogate_get_sample_outputs(s, values, ierr, layout)
    type(surrogate_t), intent(in) :: s
    real(real64), intent(inout) :: values(:, :)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: layout
    real(real64), allocatable, target :: rows(:, :)
    integer(c_int64_t) :: b
    integer(c_int) :: sin, sout
    integer :: lay
    lay = layout_or_default(layout)
    b = 0
    sin = 0
    sout = 0
    ierr = c_status(c_surrogate_samples(s%handle, b))
    if (ierr == SURROGATE_OK) ierr = c_status(c_surrogate_sample_channels(s%handle, sin, sout))
    if (ierr /= SURROGATE_OK) return
    allocate(rows(max(sout, 1_c_int), max(b, 1_c_int64_t)))
    if ((lay == SURROGATE_COMPONENTS_FIRST .and. (size(values, 1) /= sout .or. size(values, 2) /= b)) .or. &
        (lay /= SURROGATE_COMPONENTS_FIRST .and. (size(values, 1) /= b .or. size(values, 2) /= sout))) then
      ierr = c_status(c_surrogate_get_sample_outputs_f64(s%handle, -1_c_int64_t, c_loc(rows)))
      return
    end if
    ierr = c_status(c_surrogate_get_sample_outputs_f64(s%handle, int(size(rows), c_int64_t), c_loc(rows)))
    if (ierr /= SURROGATE_OK) return
    if (lay == SURROGATE_COMPONENTS_FIRST) then
      values = rows(1:sout, 1:b)
    else
      values = transpose(rows(1:sout, 1:b))
    end if
  end subroutine surrogate_get_sample_outputs

  !> .true. between a successful surrogate_open and surrogate_close.
  logical function surrogate_is_open(s)
    type(surrogate_t), intent(in) :: s
    surrogate_is_open = c_associated(s%handle)
  end function surrogate_is_open

  integer function surrogate_in_channels(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer(c_int) :: channels
    channels = 0
    ierr = c_status(c_surrogate_in_channels(s%handle, channels))
    surrogate_in_channels = int(channels)
  end function surrogate_in_channels

  integer function surrogate_out_channels(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer(c_int) :: channels
    channels = 0
    ierr = c_status(c_surrogate_out_channels(s%handle, channels))
    surrogate_out_channels = int(channels)
  end function surrogate_out_channels

  !> Name of input (kind = SURROGATE_INPUT) or output (SURROGATE_OUTPUT) channel `channel` (1-based).
  function surrogate_channel_name(s, kind, channel, ierr) result(name)
    type(surrogate_t), intent(in) :: s
    integer, intent(in) :: kind, channel
    integer, intent(out) :: ierr
    character(len=:), allocatable :: name
    name = channel_text(s, kind, channel, .false., ierr)
  end function surrogate_channel_name

  !> Unit of a channel ("" if the model file has none).
  function surrogate_channel_unit(s, kind, channel, ierr) result(unit)
    type(surrogate_t), intent(in) :: s
    integer, intent(in) :: kind, channel
    integer, intent(out) :: ierr
    character(len=:), allocatable :: unit
    unit = channel_text(s, kind, channel, .true., ierr)
  end function surrogate_channel_unit

  function channel_text(s, kind, channel, unit, ierr) result(text)
    type(surrogate_t), intent(in) :: s
    integer, intent(in) :: kind, channel
    logical, intent(in) :: unit
    integer, intent(out) :: ierr
    character(len=:), allocatable :: text
    character(kind=c_char), allocatable :: buffer(:)
    integer(c_size_t) :: n
    integer(c_int) :: rc
    text = ''
    if (kind /= SURROGATE_INPUT .and. kind /= SURROGATE_OUTPUT) then
      call module_error('surrogate_channel_'//merge('unit', 'name', unit)//': kind '//itoa(int(kind, int64))// &
                        ' is neither SURROGATE_INPUT (0) nor SURROGATE_OUTPUT (1)')
      ierr = SURROGATE_ERR_INVALID_ARGUMENT
      return
    end if
    n = 64
    do ! grow the buffer until the text fits
      allocate (buffer(n))
      if (unit) then
        rc = c_surrogate_channel_unit(s%handle, int(kind, c_int), int(channel - 1, c_int), buffer, n)
      else
        rc = c_surrogate_channel_name(s%handle, int(kind, c_int), int(channel - 1, c_int), buffer, n)
      end if
      ierr = c_status(rc)
      if (ierr /= SURROGATE_OK) return
      text = buffer_string(buffer)
      if (len(text) < n - 1) return
      deallocate (buffer)
      n = 4 * n
    end do
  end function channel_text

  !> The model's architecture ("flare").
  function surrogate_architecture(s, ierr) result(text)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    character(len=:), allocatable :: text
    character(kind=c_char) :: buffer(256)
    text = ''
    ierr = c_status(c_surrogate_architecture(s%handle, buffer, size(buffer, kind=c_size_t)))
    if (ierr == SURROGATE_OK) text = buffer_string(buffer)
  end function surrogate_architecture

  !> Seconds taken by the last surrogate_predict on this rank.
  real(real64) function surrogate_last_predict_seconds(s, ierr)
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    real(c_double) :: seconds
    seconds = 0
    ierr = c_status(c_surrogate_last_predict_seconds(s%handle, seconds))
    surrogate_last_predict_seconds = real(seconds, real64)
  end function surrogate_last_predict_seconds

  !> Message of the last failed call ("" if none).
  function surrogate_last_error() result(message)
    character(len=:), allocatable :: message
    if (module_message_active) then
      message = module_message
    else
      message = fortran_string(c_surrogate_last_error())
    end if
  end function surrogate_last_error

  !> Static description of a status code.
  function surrogate_status_string(status) result(text)
    integer, intent(in) :: status
    character(len=:), allocatable :: text
    text = fortran_string(c_surrogate_status_string(int(status, c_int)))
  end function surrogate_status_string

  !> Library version "MAJOR.MINOR.PATCH".
  function surrogate_version() result(text)
    character(len=:), allocatable :: text
    text = fortran_string(c_surrogate_version())
  end function surrogate_version

  ! =================================================================================================
  ! VTK output
  ! =================================================================================================
  ! The staging calls (set_cells, add_array, add_prediction) are local. As in the C API, a bad
  ! argument is returned at once AND makes the series' next surrogate_vtk_write fail on every rank;
  ! problems found by this module are handed to the library as an argument it rejects (and keeps).

  !> Returns ierr for a staging problem found here, after making the next write fail on every rank.
  integer function defer_problem(vtk, problem)
    type(surrogate_vtk_t), intent(in) :: vtk
    character(len=*), intent(in) :: problem
    integer(c_int) :: rc
    ! An array without components is an error the library keeps for the next write.
    rc = c_surrogate_vtk_add_array_f64(vtk%handle, c_string('rejected'), c_null_ptr, 0_c_int, c_null_ptr, &
                                       1_c_int64_t, 1_c_int64_t)
    defer_problem = forced_status(rc, problem)
  end function defer_problem

  subroutine vtk_open_f08(vtk, comm, directory, name, ierr, format)
    type(surrogate_vtk_t), intent(inout) :: vtk
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: directory, name
    integer, intent(out) :: ierr
    integer, intent(in), optional :: format
    call vtk_open_integer(vtk, comm%MPI_VAL, directory, name, ierr, format)
  end subroutine vtk_open_f08

  !> Collective. Files <directory>/<name>.pvd, <name>_<step>.pvtu, <name>_<step>/piece_<rank>.vtu; with
  !> format = SURROGATE_VTK_FORMAT_VTKHDF <directory>/<name>.hdf.series and <name>_<step>.hdf.
  subroutine vtk_open_integer(vtk, comm, directory, name, ierr, format)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer, intent(in) :: comm
    character(len=*), intent(in) :: directory, name
    integer, intent(out) :: ierr
    integer, intent(in), optional :: format
    type(c_ptr) :: handle
    integer(c_int) :: rc, c_format
    handle = c_null_ptr
    c_format = SURROGATE_VTK_FORMAT_VTU
    if (present(format)) c_format = int(format, c_int)
    if (c_associated(vtk%handle)) then
      ! Opening over an open series would leak it: fail on every rank (an empty series name is an
      ! error the library agrees on).
      rc = c_surrogate_vtk_open_f(int(comm, c_int), c_string(directory), c_string(''), handle)
      ierr = forced_status(rc, 'surrogate_vtk_open: this surrogate_vtk_t is already open; close it first')
      return
    end if
    rc = c_surrogate_vtk_open_format_f(int(comm, c_int), c_string(directory), c_string(name), c_format, handle)
    ierr = c_status(rc)
    vtk%handle = handle
  end subroutine vtk_open_integer

  !> Collective. Closes the series (a surrogate_vtk_t that is not open is a no-op).
  subroutine surrogate_vtk_close(vtk, ierr)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer, intent(out) :: ierr
    ierr = c_status(c_surrogate_vtk_close(vtk%handle))
    vtk%handle = c_null_ptr
  end subroutine surrogate_vtk_close

  type(c_ptr) function loc_i64(a)
    integer(int64), intent(in), target, contiguous :: a(:)
    loc_i64 = c_null_ptr
    if (size(a) > 0) loc_i64 = c_loc(a)
  end function loc_i64

  type(c_ptr) function loc_i8(a)
    integer(int8), intent(in), target, contiguous :: a(:)
    loc_i8 = c_null_ptr
    if (size(a) > 0) loc_i8 = c_loc(a)
  end function loc_i8

  integer function base_or_default(index_base)
    integer, intent(in), optional :: index_base
    base_or_default = 1
    if (present(index_base)) base_or_default = index_base
  end function base_or_default

  ! Cells over the local points: connectivity lists the points of every cell (local point numbers,
  ! 1-based unless index_base = 0), offsets(c) is the number of connectivity entries up to and
  ! including cell c (VTK's convention), types(c) a SURROGATE_VTK_* value. Zero cells remove them
  ! (the points are then written as vertices). The library copies the cells.

  subroutine vtk_set_cells_i64_i8(vtk, connectivity, offsets, types, ierr, index_base)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer(int64), intent(in), target, contiguous :: connectivity(:), offsets(:)
    integer(int8), intent(in), target, contiguous :: types(:)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: index_base
    integer(int64), allocatable, target :: shifted(:)
    integer :: base
    base = base_or_default(index_base)
    if (base == 0) then
      call set_cells_common(vtk, connectivity, loc_i64(connectivity), offsets, loc_i8(types), size(types), base, ierr)
    else
      allocate (shifted(size(connectivity)))
      shifted = connectivity - base
      call set_cells_common(vtk, connectivity, loc_i64(shifted), offsets, loc_i8(types), size(types), base, ierr)
    end if
  end subroutine vtk_set_cells_i64_i8

  subroutine vtk_set_cells_i64_int(vtk, connectivity, offsets, types, ierr, index_base)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer(int64), intent(in), target, contiguous :: connectivity(:), offsets(:)
    integer, intent(in) :: types(:)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: index_base
    integer(int64), allocatable, target :: shifted(:)
    integer(int8), allocatable, target :: types8(:)
    integer :: base
    base = base_or_default(index_base)
    allocate (types8(size(types)))
    types8 = int(types, int8)
    if (base == 0) then
      call set_cells_common(vtk, connectivity, loc_i64(connectivity), offsets, loc_i8(types8), size(types), base, ierr)
    else
      allocate (shifted(size(connectivity)))
      shifted = connectivity - base
      call set_cells_common(vtk, connectivity, loc_i64(shifted), offsets, loc_i8(types8), size(types), base, ierr)
    end if
  end subroutine vtk_set_cells_i64_int

  subroutine vtk_set_cells_int_i8(vtk, connectivity, offsets, types, ierr, index_base)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer, intent(in) :: connectivity(:), offsets(:)
    integer(int8), intent(in), target, contiguous :: types(:)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: index_base
    integer(int64), allocatable, target :: connectivity64(:), offsets64(:)
    integer :: base
    base = base_or_default(index_base)
    allocate (connectivity64(size(connectivity)), offsets64(size(offsets)))
    connectivity64 = int(connectivity, int64) - base
    offsets64 = int(offsets, int64)
    call set_cells_common(vtk, connectivity64, loc_i64(connectivity64), offsets64, loc_i8(types), size(types), &
                          base, ierr)
  end subroutine vtk_set_cells_int_i8

  subroutine vtk_set_cells_int_int(vtk, connectivity, offsets, types, ierr, index_base)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer, intent(in) :: connectivity(:), offsets(:)
    integer, intent(in) :: types(:)
    integer, intent(out) :: ierr
    integer, intent(in), optional :: index_base
    integer(int64), allocatable, target :: connectivity64(:), offsets64(:)
    integer(int8), allocatable, target :: types8(:)
    integer :: base
    base = base_or_default(index_base)
    allocate (connectivity64(size(connectivity)), offsets64(size(offsets)), types8(size(types)))
    connectivity64 = int(connectivity, int64) - base
    offsets64 = int(offsets, int64)
    types8 = int(types, int8)
    call set_cells_common(vtk, connectivity64, loc_i64(connectivity64), offsets64, loc_i8(types8), size(types), &
                          base, ierr)
  end subroutine vtk_set_cells_int_int

  !> connectivity: the caller's array (for its size); pc: what the library reads (0-based).
  subroutine set_cells_common(vtk, connectivity, pc, offsets, pt, n_types, base, ierr)
    type(surrogate_vtk_t), intent(inout) :: vtk
    integer(int64), intent(in), target, contiguous :: connectivity(:), offsets(:)
    type(c_ptr), intent(in) :: pc, pt
    integer, intent(in) :: n_types, base
    integer, intent(out) :: ierr
    character(len=:), allocatable :: problem
    integer(c_int64_t) :: n_cells
    integer(c_int) :: rc
    problem = ''
    if (base /= 0 .and. base /= 1) then
      problem = 'surrogate_vtk_set_cells: index_base must be 0 or 1, got '//itoa(int(base, int64))
    else if (size(offsets) /= n_types) then
      problem = 'surrogate_vtk_set_cells: '//itoa(size(offsets, kind=int64))//' offsets for '// &
                itoa(int(n_types, int64))//' cell types'
    else if (n_types > 0) then
      ! The library takes the connectivity's length from the last offset: it must be exact.
      if (offsets(n_types) /= size(connectivity, kind=int64)) &
        problem = 'surrogate_vtk_set_cells: the last offset is '//itoa(offsets(n_types))//' but connectivity has '// &
                  itoa(size(connectivity, kind=int64))//' entries'
    end if
    n_cells = n_types
    if (problem /= '') n_cells = -1 ! the library clears the cells and fails the next write on every rank
    rc = c_surrogate_vtk_set_cells(vtk%handle, n_cells, pc, loc_i64(offsets), pt)
    if (problem /= '') then
      ierr = forced_status(rc, problem)
    else
      ierr = c_status(rc)
    end if
  end subroutine set_cells_common

  ! Staged arrays: the library reads them at the next surrogate_vtk_write (it keeps their address),
  ! so keep them alive and unchanged until then: pass variables, not expressions.

  subroutine vtk_add_array_f64_2d(vtk, name, values, ierr, unit, layout)
    type(surrogate_vtk_t), intent(inout) :: vtk
    character(len=*), intent(in) :: name
    real(real64), intent(in), target :: values(:, :)
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: unit
    integer, intent(in), optional :: layout
    integer :: lay
    lay = layout_or_default(layout)
    if (.not. valid_layout(lay)) then
      ierr = defer_problem(vtk, bad_layout_message('surrogate_vtk_add_array', lay))
      return
    end if
    call add_array_common(vtk, name, view_f64(values, lay), .true., ierr, unit)
  end subroutine vtk_add_array_f64_2d

  subroutine vtk_add_array_f32_2d(vtk, name, values, ierr, unit, layout)
    type(surrogate_vtk_t), intent(inout) :: vtk
    character(len=*), intent(in) :: name
    real(real32), intent(in), target :: values(:, :)
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: unit
    integer, intent(in), optional :: layout
    integer :: lay
    lay = layout_or_default(layout)
    if (.not. valid_layout(lay)) then
      ierr = defer_problem(vtk, bad_layout_message('surrogate_vtk_add_array', lay))
      return
    end if
    call add_array_common(vtk, name, view_f32(values, lay), .false., ierr, unit)
  end subroutine vtk_add_array_f32_2d

  subroutine vtk_add_array_f64_1d(vtk, name, values, ierr, unit)
    type(surrogate_vtk_t), intent(inout) :: vtk
    character(len=*), intent(in) :: name
    real(real64), intent(in), target :: values(:)
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: unit
    type(c_ptr) :: p1, p2
    p1 = c_null_ptr
    p2 = c_null_ptr
    if (size(values) > 0) p1 = c_loc(values(1))
    if (size(values) > 1) p2 = c_loc(values(2))
    call add_array_common(vtk, name, view_1d(size(values), p1, p2, storage_size(values) / 8), .true., ierr, unit)
  end subroutine vtk_add_array_f64_1d

  subroutine vtk_add_array_f32_1d(vtk, name, values, ierr, unit)
    type(surrogate_vtk_t), intent(inout) :: vtk
    character(len=*), intent(in) :: name
    real(real32), intent(in), target :: values(:)
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: unit
    type(c_ptr) :: p1, p2
    p1 = c_null_ptr
    p2 = c_null_ptr
    if (size(values) > 0) p1 = c_loc(values(1))
    if (size(values) > 1) p2 = c_loc(values(2))
    call add_array_common(vtk, name, view_1d(size(values), p1, p2, storage_size(values) / 8), .false., ierr, unit)
  end subroutine vtk_add_array_f32_1d

  subroutine add_array_common(vtk, name, v, double, ierr, unit)
    type(surrogate_vtk_t), intent(inout) :: vtk
    character(len=*), intent(in) :: name
    type(view_t), intent(in) :: v
    logical, intent(in) :: double
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: unit
    character(kind=c_char), allocatable, target :: c_unit(:)
    type(c_ptr) :: punit
    integer(c_int) :: rc
    punit = c_null_ptr
    if (present(unit)) then
      allocate (c_unit(len(unit) + 1))
      c_unit = c_string(unit)
      punit = c_loc(c_unit)
    end if
    if (double) then
      rc = c_surrogate_vtk_add_array_f64(vtk%handle, c_string(name), punit, int(v%components, c_int), v%data, &
                                         v%point_stride, v%component_stride)
    else
      rc = c_surrogate_vtk_add_array_f32(vtk%handle, c_string(name), punit, int(v%components, c_int), v%data, &
                                         v%point_stride, v%component_stride)
    end if
    ierr = c_status(rc)
  end subroutine add_array_common

  !> "" if a prediction array of view v fits surrogate s.
  function prediction_problem(s, v, layout) result(problem)
    type(surrogate_t), intent(in) :: s
    type(view_t), intent(in) :: v
    integer, intent(in) :: layout
    character(len=:), allocatable :: problem
    problem = ''
    if (s%n_local < 0) then
      problem = 'surrogate_vtk_add_prediction: the surrogate has no points (call surrogate_set_points first)'
    else
      problem = shape_problem('surrogate_vtk_add_prediction', 'prediction', v, s%n_local, int(s%out_channels, int64), &
                              layout)
    end if
  end function prediction_problem

  !> Stages the surrogate's outputs, one scalar array per channel named (and with the unit) from the
  !> model file, each name prefixed by `prefix`.
  subroutine vtk_add_prediction_f64(vtk, s, prediction, ierr, prefix, layout)
    type(surrogate_vtk_t), intent(inout) :: vtk
    type(surrogate_t), intent(in) :: s
    real(real64), intent(in), target :: prediction(:, :)
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: prefix
    integer, intent(in), optional :: layout
    character(kind=c_char), allocatable, target :: c_prefix(:)
    character(len=:), allocatable :: problem
    type(c_ptr) :: pprefix
    type(view_t) :: v
    integer :: lay
    lay = layout_or_default(layout)
    if (.not. valid_layout(lay)) then
      ierr = defer_problem(vtk, bad_layout_message('surrogate_vtk_add_prediction', lay))
      return
    end if
    v = view_f64(prediction, lay)
    problem = prediction_problem(s, v, lay)
    if (problem /= '' .and. s%n_local >= 0) then ! (without points the library reports it)
      ierr = defer_problem(vtk, problem)
      return
    end if
    pprefix = c_null_ptr
    if (present(prefix)) then
      allocate (c_prefix(len(prefix) + 1))
      c_prefix = c_string(prefix)
      pprefix = c_loc(c_prefix)
    end if
    ierr = c_status(c_surrogate_vtk_add_prediction_f64(vtk%handle, s%handle, v%data, v%point_stride, &
                                                       v%component_stride, pprefix))
  end subroutine vtk_add_prediction_f64

  !> real32 predictions: the C API stages float64 predictions only, so each channel is staged here as
  !> its own float32 array, named and with the unit from the model file (as the C function does).
  subroutine vtk_add_prediction_f32(vtk, s, prediction, ierr, prefix, layout)
    type(surrogate_vtk_t), intent(inout) :: vtk
    type(surrogate_t), intent(in) :: s
    real(real32), intent(in), target :: prediction(:, :)
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: prefix
    integer, intent(in), optional :: layout
    character(len=:), allocatable :: name, unit, pre, problem
    type(view_t) :: v, channel
    integer :: lay, c
    lay = layout_or_default(layout)
    if (.not. valid_layout(lay)) then
      ierr = defer_problem(vtk, bad_layout_message('surrogate_vtk_add_prediction', lay))
      return
    end if
    v = view_f32(prediction, lay)
    problem = prediction_problem(s, v, lay)
    if (problem /= '') then
      ierr = defer_problem(vtk, problem)
      return
    end if
    pre = ''
    if (present(prefix)) pre = prefix
    ierr = SURROGATE_OK
    do c = 1, s%out_channels
      name = surrogate_channel_name(s, SURROGATE_OUTPUT, c, ierr)
      if (ierr /= SURROGATE_OK) return
      unit = surrogate_channel_unit(s, SURROGATE_OUTPUT, c, ierr)
      if (ierr /= SURROGATE_OK) return
      channel = v
      channel%components = 1
      channel%component_stride = 1
      if (v%points > 0) then
        if (lay == SURROGATE_POINTS_FIRST) then
          channel%data = c_loc(prediction(1, c))
        else
          channel%data = c_loc(prediction(c, 1))
        end if
      end if
      call add_array_common(vtk, pre//name, channel, .false., ierr, unit)
      if (ierr /= SURROGATE_OK) return
    end do
  end subroutine vtk_add_prediction_f32

  !> Collective. Writes a step: the points coords(n_local, dim) (dim 1..3) and the staged arrays, which
  !> are then cleared. step (optional) returns the step index (0 for the first write).
  subroutine vtk_write_f64(vtk, time, coords, ierr, step, layout)
    type(surrogate_vtk_t), intent(inout) :: vtk
    real(real64), intent(in) :: time
    real(real64), intent(in), target :: coords(:, :)
    integer, intent(out) :: ierr
    integer, intent(out), optional :: step
    integer, intent(in), optional :: layout
    type(view_t) :: v
    integer :: lay
    lay = layout_or_default(layout)
    if (valid_layout(lay)) v = view_f64(coords, lay)
    call write_common(vtk, time, v, lay, ierr, step)
  end subroutine vtk_write_f64

  !> real32 points: written from a real64 copy (the C API takes float64 points).
  subroutine vtk_write_f32(vtk, time, coords, ierr, step, layout)
    type(surrogate_vtk_t), intent(inout) :: vtk
    real(real64), intent(in) :: time
    real(real32), intent(in) :: coords(:, :)
    integer, intent(out) :: ierr
    integer, intent(out), optional :: step
    integer, intent(in), optional :: layout
    real(real64), allocatable, target :: copy(:, :)
    type(view_t) :: v
    integer :: lay
    lay = layout_or_default(layout)
    allocate (copy(size(coords, 1), size(coords, 2)))
    copy = real(coords, real64)
    if (valid_layout(lay)) v = view_f64(copy, lay)
    call write_common(vtk, time, v, lay, ierr, step)
  end subroutine vtk_write_f32

  subroutine write_common(vtk, time, v, layout, ierr, step)
    type(surrogate_vtk_t), intent(inout) :: vtk
    real(real64), intent(in) :: time
    type(view_t), intent(in) :: v
    integer, intent(in) :: layout
    integer, intent(out) :: ierr
    integer, intent(out), optional :: step
    integer(c_int), target :: c_step
    integer(c_int) :: rc
    c_step = -1
    if (valid_layout(layout)) then
      rc = c_surrogate_vtk_write(vtk%handle, real(time, c_double), v%points, int(v%components, c_int), v%data, &
                                 v%point_stride, v%component_stride, c_loc(c_step))
      ierr = c_status(rc)
    else ! points of dimension 0: rejected by the library on every rank
      rc = c_surrogate_vtk_write(vtk%handle, real(time, c_double), 0_c_int64_t, 0_c_int, c_null_ptr, &
                                 1_c_int64_t, 1_c_int64_t, c_loc(c_step))
      ierr = forced_status(rc, bad_layout_message('surrogate_vtk_write', layout))
    end if
    if (present(step)) step = int(c_step)
  end subroutine write_common

  !> Collective. Writes a step with the points given to surrogate_set_points.
  subroutine vtk_write_points_of(vtk, time, s, ierr, step)
    type(surrogate_vtk_t), intent(inout) :: vtk
    real(real64), intent(in) :: time
    type(surrogate_t), intent(in) :: s
    integer, intent(out) :: ierr
    integer, intent(out), optional :: step
    integer(c_int), target :: c_step
    c_step = -1
    ierr = c_status(c_surrogate_vtk_write_points_of(vtk%handle, real(time, c_double), s%handle, c_loc(c_step)))
    if (present(step)) step = int(c_step)
  end subroutine vtk_write_points_of

end module surrogate
