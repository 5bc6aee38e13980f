! surrogate_set_edges and surrogate_position_dim of the `surrogate` Fortran module under mpirun, on the
! golden Erwin model with message passing and no graph rule in its file (edges must be given):
!
!   test_fortran_edges <erwin model.h5>
!
! 256 deterministic points in [0,1]^3 (one sample), 4 input channels, each rank owning a contiguous
! block (rank-major global ids). Edges: every point receives from itself and its two neighbours in the
! numbering (ring), each rank giving the edges of its own receivers. Checks that
!  - position_dim is 3;
!  - predict without edges fails on every rank with SURROGATE_ERR_INPUT (no graph rule);
!  - sources and receivers of different lengths fail on every rank (SURROGATE_ERR_INVALID_ARGUMENT);
!  - with the edges, the distributed prediction is bitwise the one-process prediction of all points
!    with all edges (MPI_COMM_SELF), on every rank;
!  - other edges (self loops only) change the prediction;
!  - zero-size edge arrays on every rank remove the edges (predict fails again).
program test_fortran_edges
  use mpi_f08
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real64, int64, error_unit
  implicit none

  integer, parameter :: n_global = 256, c_in = 4
  type(MPI_Comm) :: world
  type(surrogate_t) :: s, single
  character(len=1024) :: model
  integer :: rank, nranks, mpierr, failures, ierr, i, n, first, total
  real(real64), allocatable :: coords(:, :), features(:, :), out(:, :), out_loops(:, :)
  real(real64), allocatable :: all_coords(:, :), all_features(:, :), reference(:, :)
  integer(int64), allocatable :: src(:), dst(:), all_src(:), all_dst(:), loops(:), none(:)

  call MPI_Init(mpierr)
  world = MPI_COMM_WORLD
  call MPI_Comm_rank(world, rank, mpierr)
  call MPI_Comm_size(world, nranks, mpierr)
  failures = 0
  model = 'model.h5'
  if (command_argument_count() >= 1) call get_command_argument(1, model)

  ! All points and features (every rank makes them; it owns rows first+1 .. first+n).
  allocate (all_coords(n_global, 3), all_features(n_global, c_in))
  do i = 1, n_global
    all_coords(i, :) = [frac(0.754877666_real64 * i), frac(0.569840291_real64 * i), frac(0.362318841_real64 * i + 0.1_real64)]
    all_features(i, :) = [sin(3.0_real64 * all_coords(i, 1)), cos(2.0_real64 * all_coords(i, 2)), &
                          all_coords(i, 3) - 0.5_real64, 0.25_real64]
  end do
  first = n_global * rank / nranks
  n = n_global * (rank + 1) / nranks - first
  coords = all_coords(first + 1:first + n, :)
  features = all_features(first + 1:first + n, :)
  allocate (out(n, 16), out_loops(n, 16), reference(n_global, 16))
  ! Ring edges (0-based rank-major ids) of this rank's receivers, and of all points.
  call ring(first, n, src, dst)
  call ring(0, n_global, all_src, all_dst)
  loops = [(int(first + i - 1, int64), i = 1, n)]
  allocate (none(0))

  call surrogate_open(s, world, trim(model), ierr, threads=1)
  call expect_ok(ierr, 'surrogate_open')
  if (ierr /= SURROGATE_OK) then
    call finish()
    stop 1
  end if
  call check(surrogate_position_dim(s, ierr) == 3 .and. ierr == SURROGATE_OK, 'position_dim == 3')
  call surrogate_set_points(s, coords, ierr)
  call expect_ok(ierr, 'set_points')

  call surrogate_predict(s, features, out, ierr)
  call check_agreed(ierr, SURROGATE_ERR_INPUT, 'predict without edges')
  if (rank == 0) call surrogate_set_edges(s, src, dst(1:max(0, size(dst) - 1)), ierr)
  if (rank /= 0) call surrogate_set_edges(s, src, dst, ierr)
  call check_agreed(ierr, SURROGATE_ERR_INVALID_ARGUMENT, 'set_edges with sources and receivers of different lengths')

  call surrogate_set_edges(s, src, dst, ierr)
  call expect_ok(ierr, 'set_edges')
  call surrogate_predict(s, features, out, ierr)
  call expect_ok(ierr, 'predict with edges')
  call check(all(abs(out) < huge(1.0_real64)), 'finite predictions')

  call surrogate_open(single, MPI_COMM_SELF, trim(model), ierr, threads=1)
  call expect_ok(ierr, 'open on MPI_COMM_SELF')
  call surrogate_set_points(single, all_coords, ierr)
  call surrogate_set_edges(single, all_src, all_dst, ierr)
  call expect_ok(ierr, 'set_edges (one process)')
  call surrogate_predict(single, all_features, reference, ierr)
  call expect_ok(ierr, 'predict (one process)')
  call check(all(transfer(out, 1_int64, size(out)) == transfer(reference(first + 1:first + n, :), 1_int64, size(out))), &
             'distributed == one process, bitwise')
  call surrogate_close(single, ierr)

  call surrogate_set_edges(s, loops, loops, ierr)
  call expect_ok(ierr, 'set_edges (self loops)')
  call surrogate_predict(s, features, out_loops, ierr)
  call expect_ok(ierr, 'predict with self loops')
  call MPI_Allreduce(count(out_loops /= out), total, 1, MPI_INTEGER, MPI_SUM, world, mpierr)
  call check(total > n_global, 'other edges change the prediction ('//itoa(total)//' values differ)')

  call surrogate_set_edges(s, none, none, ierr)
  call expect_ok(ierr, 'set_edges (remove)')
  call surrogate_predict(s, features, out, ierr)
  call check_agreed(ierr, SURROGATE_ERR_INPUT, 'predict after the edges were removed')
  call surrogate_close(s, ierr)
  call expect_ok(ierr, 'close')
  call finish()
  if (failures /= 0) stop 1

contains

  pure real(real64) function frac(x)
    real(real64), intent(in) :: x
    frac = x - floor(x)
  end function frac

  !> Edges (j -> i) for receivers i = first .. first+count-1: i-1, i, i+1 (mod n_global).
  subroutine ring(first, count, sources, receivers)
    integer, intent(in) :: first, count
    integer(int64), allocatable, intent(out) :: sources(:), receivers(:)
    integer :: i, k
    allocate (sources(3 * count), receivers(3 * count))
    do i = 0, count - 1
      do k = -1, 1
        sources(3 * i + k + 2) = int(modulo(first + i + k, n_global), int64)
        receivers(3 * i + k + 2) = int(first + i, int64)
      end do
    end do
  end subroutine ring

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

  !> The same status (the expected one) on every rank.
  subroutine check_agreed(status, expected, what)
    integer, intent(in) :: status, expected
    character(len=*), intent(in) :: what
    integer :: lo, hi
    call MPI_Allreduce(status, lo, 1, MPI_INTEGER, MPI_MIN, world, mpierr)
    call MPI_Allreduce(status, hi, 1, MPI_INTEGER, MPI_MAX, world, mpierr)
    call check(lo == hi .and. status == expected, what//': status '//itoa(status)//' (ranks: '//itoa(lo)//'..'// &
               itoa(hi)//', expected '//itoa(expected)//'): '//surrogate_last_error())
  end subroutine check_agreed

  subroutine finish()
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, world, mpierr)
    if (rank == 0) write (*, '(a,i0,a,a,a,i0,a)') 'test_fortran_edges on ', nranks, ' rank(s): ', &
      merge('passed', 'FAILED', total == 0), ' (', total, ' failures)'
    failures = total
    call MPI_Finalize(mpierr)
  end subroutine finish

end program test_fortran_edges
