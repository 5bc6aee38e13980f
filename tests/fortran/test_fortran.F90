! The `surrogate` Fortran module under mpirun, built twice: with `use mpi_f08` (type(MPI_Comm)) and with
! `use mpi` (integer communicators), -DSURROGATE_TEST_MPI_F08 selecting the first.
!
!   test_fortran <model.h5> <output directory>
!
! With the golden model (2 inputs, 1 output) on 500 deterministic points in [0,1]^2, each rank owning a
! contiguous part (at 3+ ranks the last rank owns none), it checks that
!  - points-first, components-first and strided sections of larger arrays give bitwise-identical
!    predictions;
!  - real32 and real64 agree within float32 rounding;
!  - the distributed prediction equals a one-process prediction of all points on rank 0 (MPI_COMM_SELF)
!    within 1e-6 relative, and bitwise in reproducible mode;
!  - failures are agreed: a NaN on the last rank with points, a wrong output shape on rank 0, a wrong
!    layout, a missing model file, opening an open handle or series: the same ierr (and, for the
!    library's own errors, the same message) on every rank, nobody hangs; the handle still works
!    afterwards;
!  - the VTK series (both layouts, real32 and real64, cells, the surrogate's points) is written, and a
!    staging error on one rank makes the next write fail on every rank.
program test_fortran
#ifdef SURROGATE_TEST_MPI_F08
  use mpi_f08
#else
  use mpi
#endif
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64, int8, error_unit
  use, intrinsic :: ieee_arithmetic, only: ieee_value, ieee_quiet_nan
  implicit none

#ifdef SURROGATE_TEST_MPI_F08
  type(MPI_Comm) :: world, self
  character(len=*), parameter :: variant = 'mpi_f08'
#else
  integer :: world, self
  character(len=*), parameter :: variant = 'mpi'
#endif
  integer, parameter :: n_global = 500
  integer :: rank, nranks, mpierr, failures, ierr, i, n, first, last, last_with_points, step
  integer, allocatable :: counts(:), displs(:)
  character(len=1024) :: model, out_dir
  character(len=:), allocatable :: text
  real(real64), allocatable, target :: coords_pf(:, :), coords_cf(:, :), big(:, :), wide(:, :), bad(:, :)
  real(real64), allocatable, target :: out_pf(:, :), out_cf(:, :), out_big(:, :), out_t(:, :), out_wrong(:, :)
  real(real64), allocatable, target :: gathered(:), all_coords(:, :), reference(:, :), scalar(:)
  real(real32), allocatable, target :: coords32(:, :), out32(:, :), out32_cf(:, :)
  integer(int64), allocatable :: ids(:)
  type(surrogate_t) :: s, single, missing
  type(surrogate_vtk_t) :: vtk
  logical :: exists

  call MPI_Init(mpierr)
  world = MPI_COMM_WORLD
  self = MPI_COMM_SELF
  call MPI_Comm_rank(world, rank, mpierr)
  call MPI_Comm_size(world, nranks, mpierr)
  failures = 0
  model = 'model.h5'
  out_dir = '.'
  if (command_argument_count() >= 1) call get_command_argument(1, model)
  if (command_argument_count() >= 2) call get_command_argument(2, out_dir)

  ! --- The rank's points: a contiguous block; at 3+ ranks the last rank owns none -------------------
  first = n_global * rank / nranks
  last = n_global * (rank + 1) / nranks
  if (nranks >= 3 .and. rank == nranks - 1) then
    first = n_global
    last = n_global
  end if
  if (nranks >= 3 .and. rank == nranks - 2) last = n_global
  n = last - first
  allocate (coords_pf(n, 2), coords_cf(2, n), coords32(n, 2))
  do i = 1, n
    coords_pf(i, :) = point(first + i - 1)
  end do
  coords_cf = transpose(coords_pf)
  coords32 = real(coords_pf, real32)
  allocate (out_pf(n, 1), out_cf(1, n), out32(n, 1), out32_cf(1, n), out_wrong(n, 2))

  ! --- Open and queries -----------------------------------------------------------------------------
  call surrogate_open(s, world, trim(model), ierr, threads=1)
  call expect_ok(ierr, 'surrogate_open')
  if (ierr /= SURROGATE_OK) then
    call finish()
    stop 1
  end if
  call check(surrogate_is_open(s), 'surrogate_is_open after open')
  call check(surrogate_in_channels(s, ierr) == 2 .and. ierr == 0, 'in_channels == 2')
  call check(surrogate_out_channels(s, ierr) == 1 .and. ierr == 0, 'out_channels == 1')
  text = surrogate_channel_name(s, SURROGATE_INPUT, 2, ierr)
  call check(text == 'in1' .and. ierr == 0, 'input channel 2 is in1, got "'//text//'"')
  text = surrogate_channel_name(s, SURROGATE_OUTPUT, 1, ierr)
  call check(text == 'out0' .and. ierr == 0, 'output channel 1 is out0, got "'//text//'"')
  text = surrogate_channel_unit(s, SURROGATE_OUTPUT, 1, ierr)
  call check(ierr == 0, 'output unit')
  text = surrogate_channel_name(s, SURROGATE_OUTPUT, 2, ierr)
  text = surrogate_last_error()
  call check(ierr == SURROGATE_ERR_INVALID_ARGUMENT .and. index(text, 'out of range') > 0, &
             'output channel 2 does not exist: '//text)
  text = surrogate_channel_name(s, 7, 1, ierr)
  call check(ierr == SURROGATE_ERR_INVALID_ARGUMENT, 'channel kind 7')
  text = surrogate_architecture(s, ierr)
  call check(text == 'flare' .and. ierr == 0, 'architecture flare, got "'//text//'"')
  call check(len(surrogate_version()) >= 5, 'version "'//surrogate_version()//'"')
  call check(surrogate_status_string(SURROGATE_ERR_IO) /= '', 'status string')

  ! --- Layouts: points first, components first, sections of larger arrays: bitwise identical --------
  call surrogate_set_points(s, coords_pf, ierr)
  call expect_ok(ierr, 'set_points (points first)')
  call surrogate_predict(s, coords_pf, out_pf, ierr)
  call expect_ok(ierr, 'predict (points first)')
  call check(all(ieee_finite(out_pf)), 'finite predictions')

  call surrogate_set_points(s, coords_cf, ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call expect_ok(ierr, 'set_points (components first)')
  call surrogate_predict(s, coords_cf, out_cf, ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call expect_ok(ierr, 'predict (components first)')
  call check(same_bits(out_pf(:, 1), out_cf(1, :)), 'components first == points first (bitwise)')

  ! coords inside big(n + 5, 4) (leading dimension n + 5), inputs every other row of wide(2n, 2),
  ! outputs a column of out_big(n + 3, 3): no copies, strides read from the arrays.
  allocate (big(n + 5, 4), wide(2 * n, 2), out_big(n + 3, 3))
  big = -1
  big(1:n, 2:3) = coords_pf
  wide = -1
  wide(1:2 * n:2, :) = coords_pf
  out_big = -7
  call surrogate_set_points(s, big(1:n, 2:3), ierr)
  call expect_ok(ierr, 'set_points (section)')
  call surrogate_predict(s, wide(1:2 * n:2, :), out_big(1:n, 2:2), ierr)
  call expect_ok(ierr, 'predict (sections)')
  call check(same_bits(out_pf(:, 1), out_big(1:n, 2)), 'sections == contiguous (bitwise)')
  call check(all(out_big(n + 1:, 2) == -7) .and. all(out_big(:, 1) == -7) .and. all(out_big(:, 3) == -7), &
             'writes stay inside the output section')
  ! components first: an expression as input (a temporary), a row section of out_t(3, n) as output
  allocate (out_t(3, n))
  out_t = -7
  call surrogate_predict(s, transpose(wide(1:2 * n:2, :)), out_t(2:2, :), ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call expect_ok(ierr, 'predict (expression input, row section output)')
  call check(same_bits(out_pf(:, 1), out_t(2, :)), 'row section == contiguous (bitwise)')
  call check(all(out_t(1, :) == -7) .and. all(out_t(3, :) == -7), 'writes stay inside the row section')

  ! --- real32 against real64 ------------------------------------------------------------------------
  call surrogate_set_points(s, coords32, ierr)
  call expect_ok(ierr, 'set_points (real32)')
  call surrogate_predict(s, coords32, out32, ierr)
  call expect_ok(ierr, 'predict (real32)')
  call check(all(abs(real(out32(:, 1), real64) - out_pf(:, 1)) <= 1e-6_real64 * max(abs(out_pf(:, 1)), 1e-3_real64)), &
             'real32 == real64 within float32 rounding')
  call surrogate_set_points(s, transpose(coords32), ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call expect_ok(ierr, 'set_points (real32, components first)')
  call surrogate_predict(s, transpose(coords32), out32_cf, ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call expect_ok(ierr, 'predict (real32, components first)')
  call check(same_bits32(out32(:, 1), out32_cf(1, :)), 'real32: components first == points first (bitwise)')

  ! --- Distributed against one process on rank 0 ----------------------------------------------------
  allocate (counts(nranks), displs(nranks), gathered(n_global), all_coords(n_global, 2), reference(n_global, 1))
  do i = 1, n_global
    all_coords(i, :) = point(i - 1)
  end do
  call MPI_Allgather(n, 1, MPI_INTEGER, counts, 1, MPI_INTEGER, world, mpierr)
  displs(1) = 0
  do i = 2, nranks
    displs(i) = displs(i - 1) + counts(i - 1)
  end do
  allocate (ids(n))
  ids = [(int(first + i - 1, int64), i = 1, n)]
  call surrogate_set_points(s, coords_pf, ierr, global_ids=ids)
  call expect_ok(ierr, 'set_points (with global ids)')
  call surrogate_predict(s, coords_pf, out_pf, ierr)
  call expect_ok(ierr, 'predict (distributed)')
  call MPI_Gatherv(out_pf, n, MPI_DOUBLE_PRECISION, gathered, counts, displs, MPI_DOUBLE_PRECISION, 0, world, mpierr)
  if (rank == 0) then
    call surrogate_open(single, self, trim(model), ierr, threads=1)
    call expect_ok(ierr, 'open on MPI_COMM_SELF')
    call surrogate_set_points(single, all_coords, ierr)
    call expect_ok(ierr, 'set_points (one process)')
    call surrogate_predict(single, all_coords, reference, ierr)
    call expect_ok(ierr, 'predict (one process)')
    call check(all(abs(gathered - reference(:, 1)) <= 1e-6_real64 * max(abs(reference(:, 1)), 1e-3_real64)), &
               'distributed == one process within 1e-6')
  end if

  call surrogate_set_options(s, ierr, reproducible=.true.)
  call expect_ok(ierr, 'set_options reproducible')
  call surrogate_set_points(s, coords_pf, ierr)
  call expect_ok(ierr, 'set_points (reproducible)')
  call surrogate_predict(s, coords_pf, out_pf, ierr)
  call expect_ok(ierr, 'predict (reproducible)')
  call MPI_Gatherv(out_pf, n, MPI_DOUBLE_PRECISION, gathered, counts, displs, MPI_DOUBLE_PRECISION, 0, world, mpierr)
  if (rank == 0) then
    call surrogate_set_options(single, ierr, reproducible=.true.)
    call expect_ok(ierr, 'set_options reproducible (one process)')
    call surrogate_set_points(single, all_coords, ierr)
    call surrogate_predict(single, all_coords, reference, ierr)
    call expect_ok(ierr, 'predict (one process, reproducible)')
    call check(same_bits(gathered, reference(:, 1)), 'distributed == one process, bitwise (reproducible)')
    call surrogate_close(single, ierr)
    call expect_ok(ierr, 'close (one process)')
  end if
  ! set_options changes only what it is given: threads stay 1, reproducible stays on
  call surrogate_set_options(s, ierr, threads=2)
  call expect_ok(ierr, 'set_options threads=2')
  call surrogate_predict(s, coords_pf, out_cf, ierr, layout=SURROGATE_POINTS_FIRST) ! wrong: out_cf is (1, n)
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'outputs (1, n) with points first', .false.)
  call surrogate_set_options(s, ierr, threads=1)

  ! --- Errors: agreed on every rank -----------------------------------------------------------------
  ! NaN in the last rank with points
  last_with_points = merge(rank, -1, n > 0)
  call MPI_Allreduce(MPI_IN_PLACE, last_with_points, 1, MPI_INTEGER, MPI_MAX, world, mpierr)
  allocate (bad(n, 2))
  bad = coords_pf
  if (rank == last_with_points) bad(1, 2) = ieee_value(1.0_real64, ieee_quiet_nan)
  call surrogate_predict(s, bad, out_pf, ierr)
  call check_agreed(ierr, SURROGATE_ERR_INPUT, 'NaN input on the last rank with points', .true.)
  call check(index(surrogate_last_error(), 'NaN/Inf') > 0, 'NaN message: '//surrogate_last_error())
  if (nranks > 1) call check(index(surrogate_last_error(), 'rank '//itoa(last_with_points)) > 0, &
                             'NaN message names the rank: '//surrogate_last_error())

  ! A wrong output shape on rank 0 only (rank 0 always owns points): agreed status, rank 0 says why
  if (rank == 0) then
    call surrogate_predict(s, coords_pf, out_wrong, ierr)
  else
    call surrogate_predict(s, coords_pf, out_pf, ierr)
  end if
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'wrong output shape on rank 0', .false.)
  if (rank == 0) call check(index(surrogate_last_error(), 'outputs is') > 0, &
                            'shape message: '//surrogate_last_error())

  ! A wrong layout value everywhere, and wrong global_ids on rank 0
  call surrogate_predict(s, coords_pf, out_pf, ierr, layout=7)
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'layout 7', .false.)
  if (rank == 0) then
    call surrogate_set_points(s, coords_pf, ierr, global_ids=ids(1:n - 1))
  else
    call surrogate_set_points(s, coords_pf, ierr, global_ids=ids)
  end if
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'short global_ids on rank 0', .false.)
  if (rank == 0) call check(index(surrogate_last_error(), 'global_ids') > 0, 'ids message: '//surrogate_last_error())

  ! A missing model file
  call surrogate_open(missing, world, '/nonexistent/model.h5', ierr)
  call check_agreed(ierr, SURROGATE_ERR_IO, 'missing model file', .true.)
  call check(.not. surrogate_is_open(missing), 'no handle after a failed open')

  ! Opening an open handle
  call surrogate_open(s, world, trim(model), ierr)
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'open over an open handle', .false.)
  call check(index(surrogate_last_error(), 'already open') > 0, 'already open: '//surrogate_last_error())

  ! precision='fp64': reaches the model, which (FLARE) refuses it on every rank; then back to fp32
  call surrogate_set_options(s, ierr, precision='fp64')
  call expect_ok(ierr, 'set_options precision fp64')
  call surrogate_predict(s, coords_pf, out_pf, ierr)
  call check_agreed(ierr, SURROGATE_ERR_UNSUPPORTED, 'fp64 on a FLARE model', .true.)
  call check(index(surrogate_last_error(), "precision 'fp64'") > 0, 'fp64 message: '//surrogate_last_error())
  call surrogate_set_options(s, ierr, precision='fp32')
  call expect_ok(ierr, 'set_options precision fp32')

  ! The handle still works (the points are those of the last successful set_points)
  call surrogate_predict(s, coords_pf, out_pf, ierr)
  call expect_ok(ierr, 'predict after errors')
  call check(surrogate_last_predict_seconds(s, ierr) >= 0 .and. ierr == 0, 'last_predict_seconds')

  ! --- VTK ------------------------------------------------------------------------------------------
  allocate (scalar(n))
  scalar = out_pf(:, 1) * 2
  call surrogate_vtk_open(vtk, world, trim(out_dir), 'fortran_'//variant//'_np'//itoa(nranks), ierr)
  call expect_ok(ierr, 'vtk_open')
  if (ierr == SURROGATE_OK) then
    call surrogate_vtk_add_array(vtk, 'xy', coords_pf, ierr, unit='m')
    call expect_ok(ierr, 'vtk_add_array (2-D)')
    call surrogate_vtk_add_array(vtk, 'twice', scalar, ierr)
    call expect_ok(ierr, 'vtk_add_array (1-D)')
    call surrogate_vtk_add_prediction(vtk, s, out_pf, ierr, prefix='pred_')
    call expect_ok(ierr, 'vtk_add_prediction (real64)')
    call surrogate_vtk_write(vtk, 0.0_real64, coords_pf, ierr, step=step)
    call expect_ok(ierr, 'vtk_write (points first)')
    call check(step == 0, 'first step is 0')

    call surrogate_vtk_add_array(vtk, 'xy', coords_cf, ierr, layout=SURROGATE_COMPONENTS_FIRST)
    call surrogate_vtk_add_prediction(vtk, s, out32, ierr, prefix='pred32_')
    call expect_ok(ierr, 'vtk_add_prediction (real32)')
    call surrogate_vtk_write(vtk, 0.5_real64, coords_cf, ierr, step=step, layout=SURROGATE_COMPONENTS_FIRST)
    call expect_ok(ierr, 'vtk_write (components first)')
    call check(step == 1, 'second step is 1')

    ! one vertex cell per point, 1-based connectivity; then the surrogate's own points
    call surrogate_vtk_set_cells(vtk, [(i, i = 1, n)], [(i, i = 1, n)], [(SURROGATE_VTK_VERTEX, i = 1, n)], ierr)
    call expect_ok(ierr, 'vtk_set_cells')
    call surrogate_vtk_add_prediction(vtk, s, out_pf, ierr)
    call surrogate_vtk_write(vtk, 1.0_real64, s, ierr, step=step)
    call expect_ok(ierr, 'vtk_write (points of the surrogate)')
    call check(step == 2, 'third step is 2')
    call surrogate_vtk_set_cells(vtk, [integer(int64) ::], [integer(int64) ::], [integer(int8) ::], ierr)
    call expect_ok(ierr, 'vtk_set_cells (none)')

    ! a staging error on rank 0 only: returned at once there, and the next write fails everywhere
    if (rank == 0) then
      call surrogate_vtk_add_array(vtk, 'xy', coords_pf, ierr, layout=0)
      call check(ierr == SURROGATE_ERR_INVALID_ARGUMENT, 'vtk_add_array with layout 0')
    end if
    call surrogate_vtk_write(vtk, 2.0_real64, coords_pf, ierr)
    call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'vtk staging error on rank 0', .true.)
    ! cells whose last offset does not match the connectivity, on the last rank
    if (rank == nranks - 1) then
      call surrogate_vtk_set_cells(vtk, [1, 2], [1, 2, 4], [SURROGATE_VTK_VERTEX, SURROGATE_VTK_VERTEX, &
                                   SURROGATE_VTK_VERTEX], ierr)
      call check(ierr == SURROGATE_ERR_INVALID_ARGUMENT, 'vtk_set_cells: last offset')
    end if
    call surrogate_vtk_write(vtk, 2.0_real64, coords_pf, ierr)
    call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'bad cells on the last rank', .true.)
    ! opening an open series fails everywhere and leaves it usable
    call surrogate_vtk_open(vtk, world, trim(out_dir), 'other', ierr)
    call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'vtk_open over an open series', .false.)
    call check(index(surrogate_last_error(), 'already open') > 0, 'vtk already open: '//surrogate_last_error())
    call surrogate_vtk_write(vtk, 2.0_real64, coords_pf, ierr, step=step)
    call expect_ok(ierr, 'vtk_write after errors')
    call check(step == 3, 'fourth step is 3')
    call surrogate_vtk_close(vtk, ierr)
    call expect_ok(ierr, 'vtk_close')
    if (rank == 0) then
      inquire (file=trim(out_dir)//'/fortran_'//variant//'_np'//itoa(nranks)//'.pvd', exist=exists)
      call check(exists, 'the .pvd file exists')
    end if
  end if

  ! --- VTKHDF: one file per step, the format chosen at open -----------------------------------------
  call surrogate_vtk_open(vtk, world, trim(out_dir), 'fortran_hdf_'//variant//'_np'//itoa(nranks), ierr, &
                          format=SURROGATE_VTK_FORMAT_VTKHDF)
  call expect_ok(ierr, 'vtk_open (VTKHDF)')
  if (ierr == SURROGATE_OK) then
    call surrogate_vtk_add_array(vtk, 'xy', coords_pf, ierr, unit='m')
    call surrogate_vtk_add_prediction(vtk, s, out_pf, ierr, prefix='pred_')
    call surrogate_vtk_write(vtk, 0.25_real64, coords_pf, ierr, step=step)
    call expect_ok(ierr, 'vtk_write (VTKHDF)')
    call check(step == 0, 'first VTKHDF step is 0')
    call surrogate_vtk_close(vtk, ierr)
    call expect_ok(ierr, 'vtk_close (VTKHDF)')
    if (rank == 0) then
      inquire (file=trim(out_dir)//'/fortran_hdf_'//variant//'_np'//itoa(nranks)//'_000000.hdf', exist=exists)
      call check(exists, 'the VTKHDF step file exists')
      inquire (file=trim(out_dir)//'/fortran_hdf_'//variant//'_np'//itoa(nranks)//'.hdf.series', exist=exists)
      call check(exists, 'the .hdf.series file exists')
    end if
  end if
  ! an unknown format is an error on every rank
  call surrogate_vtk_open(vtk, world, trim(out_dir), 'bad_format', ierr, format=5)
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'vtk_open with format 5', .false.)

  ! --- Close ----------------------------------------------------------------------------------------
  call surrogate_close(s, ierr)
  call expect_ok(ierr, 'close')
  call check(.not. surrogate_is_open(s), 'closed')
  call surrogate_close(s, ierr)
  call expect_ok(ierr, 'close again (no-op)')
  call surrogate_set_points(s, coords_pf, ierr)
  call check(ierr == SURROGATE_ERR_INVALID_ARGUMENT, 'set_points on a closed handle')

  call finish()
  if (failures > 0) stop 1

contains

  !> Point g (0-based) of the global set, in [0, 1)^2.
  function point(g) result(xy)
    integer, intent(in) :: g
    real(real64) :: xy(2)
    xy(1) = modulo(0.6180339887_real64 * g, 1.0_real64)
    xy(2) = modulo(0.7548776662_real64 * g + 0.1_real64, 1.0_real64)
  end function point

  elemental logical function ieee_finite(x)
    real(real64), intent(in) :: x
    ieee_finite = abs(x) <= huge(x)
  end function ieee_finite

  logical function same_bits(a, b)
    real(real64), intent(in) :: a(:), b(:)
    same_bits = size(a) == size(b)
    if (same_bits) same_bits = all(transfer(a, 0_int64, size(a)) == transfer(b, 0_int64, size(b)))
  end function same_bits

  logical function same_bits32(a, b)
    real(real32), intent(in) :: a(:), b(:)
    integer :: k
    same_bits32 = size(a) == size(b)
    if (.not. same_bits32) return
    do k = 1, size(a)
      if (transfer(a(k), 0) /= transfer(b(k), 0)) same_bits32 = .false.
    end do
  end function same_bits32

  function itoa(k) result(t)
    integer, intent(in) :: k
    character(len=:), allocatable :: t
    character(len=16) :: buffer
    write (buffer, '(i0)') k
    t = trim(buffer)
  end function itoa

  subroutine check(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    if (.not. condition) then
      failures = failures + 1
      write (error_unit, '(a,i0,2a)') '[rank ', rank, '] FAILED: ', what
    end if
  end subroutine check

  subroutine expect_ok(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    call check(status == SURROGATE_OK, what//' returned '//itoa(status)//': '//surrogate_last_error())
  end subroutine expect_ok

  !> The same status (the expected one) on every rank; with same_message, rank 0's message everywhere.
  subroutine check_agreed(status, expected, what, same_message)
    integer, intent(in) :: status, expected
    character(len=*), intent(in) :: what
    logical, intent(in) :: same_message
    integer :: lo, hi, length
    character(len=2048) :: root_message
    character(len=:), allocatable :: message
    call MPI_Allreduce(status, lo, 1, MPI_INTEGER, MPI_MIN, world, mpierr)
    call MPI_Allreduce(status, hi, 1, MPI_INTEGER, MPI_MAX, world, mpierr)
    call check(lo == hi .and. status == expected, what//': status '//itoa(status)//' (ranks: '//itoa(lo)//'..'// &
               itoa(hi)//', expected '//itoa(expected)//'): '//surrogate_last_error())
    if (.not. same_message) return
    message = surrogate_last_error()
    root_message = message
    length = len(message)
    call MPI_Bcast(length, 1, MPI_INTEGER, 0, world, mpierr)
    call MPI_Bcast(root_message, len(root_message), MPI_CHARACTER, 0, world, mpierr)
    call check(length == len(message) .and. root_message == message, &
               what//': message differs from rank 0''s: "'//message//'" vs "'//trim(root_message)//'"')
  end subroutine check_agreed

  subroutine finish()
    integer :: total
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, world, mpierr)
    if (rank == 0) write (*, '(a,a,a,i0,a,a,a,i0,a)') 'test_fortran (', variant, ') on ', nranks, ' rank(s): ', &
      merge('passed', 'FAILED', total == 0), ' (', total, ' failures)'
    failures = total
    call MPI_Finalize(mpierr)
  end subroutine finish

end program test_fortran
