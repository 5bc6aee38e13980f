! Per-sample inputs and outputs of the `surrogate` Fortran module under mpirun, on the golden Sequoia
! models (their model files):
!
!   test_fortran_samples <sequoia_seg.h5> <sequoia_cls.h5>
!
! 51 deterministic points in two samples (30 + 21), each rank owning a contiguous block. Checks that
!  - the segmentation model takes 4 values per sample and outputs per point, the classification model
!    takes none and outputs 40 per sample;
!  - a segmentation predict without per-sample inputs, or with 3 values per sample, fails on every rank
!    with SURROGATE_ERR_INPUT;
!  - with the class vectors (either layout) the distributed prediction is bitwise the one-process one;
!  - the classification model's per-sample outputs (either layout) are bitwise the one-process ones on
!    every rank.
program test_fortran_samples
  use mpi_f08
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real64, int64, error_unit
  implicit none

  integer, parameter :: n_global = 51, n0 = 30
  type(MPI_Comm) :: world
  type(surrogate_t) :: s, single
  character(len=1024) :: seg_model, cls_model
  integer :: rank, nranks, mpierr, failures, ierr, i, n, first, total, k_in, k_out, k_point
  real(real64), allocatable :: all_coords(:, :), coords(:, :), out(:, :), reference(:, :), none(:, :)
  real(real64) :: classes(2, 4), logits(2, 40), logits_t(40, 2), logits_ref(2, 40), logits_root(2, 40)
  integer(int64), allocatable :: all_samples(:), samples(:)

  call MPI_Init(mpierr)
  world = MPI_COMM_WORLD
  call MPI_Comm_rank(world, rank, mpierr)
  call MPI_Comm_size(world, nranks, mpierr)
  failures = 0
  call get_command_argument(1, seg_model)
  call get_command_argument(2, cls_model)

  allocate (all_coords(n_global, 3), all_samples(n_global))
  do i = 1, n_global
    all_coords(i, :) = 0.55_real64 * [sin(0.913_real64 * i), sin(0.731_real64 * i + 2.1_real64), &
                                      sin(0.517_real64 * i + 4.2_real64)]
    all_samples(i) = merge(0_int64, 1_int64, i <= n0)
  end do
  first = n_global * rank / nranks
  n = n_global * (rank + 1) / nranks - first
  coords = all_coords(first + 1:first + n, :)
  samples = all_samples(first + 1:first + n)
  classes = 0
  classes(1, 2) = 1
  classes(2, 4) = 1

  ! Segmentation: the class vector per sample.
  call surrogate_open(s, world, trim(seg_model), ierr, threads=1)
  call expect_ok(ierr, 'open seg')
  k_in = surrogate_sample_in_channels(s, ierr)
  k_out = surrogate_sample_out_channels(s, ierr)
  call check(k_in == 4 .and. k_out == 0, 'seg: 4 values per sample in, none out')
  call surrogate_set_points(s, coords, ierr, sample_ids=samples)
  call expect_ok(ierr, 'seg set_points')
  call check(surrogate_samples(s, ierr) == 2, 'two samples')
  allocate (out(n, 6), reference(n_global, 6))
  call surrogate_predict(s, coords, out, ierr)
  call check_agreed(ierr, SURROGATE_ERR_INPUT, 'seg predict without per-sample inputs')
  call surrogate_set_sample_inputs(s, classes(:, 1:3), ierr)
  call surrogate_predict(s, coords, out, ierr)
  call check_agreed(ierr, SURROGATE_ERR_INPUT, 'seg predict with 3 values per sample')
  call surrogate_set_sample_inputs(s, classes, ierr)
  call surrogate_predict(s, coords, out, ierr)
  call expect_ok(ierr, 'seg predict')
  call surrogate_open(single, MPI_COMM_SELF, trim(seg_model), ierr, threads=1)
  call surrogate_set_points(single, all_coords, ierr, sample_ids=all_samples)
  call surrogate_set_sample_inputs(single, transpose(classes), ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call surrogate_predict(single, all_coords, reference, ierr)
  call expect_ok(ierr, 'seg predict (one process)')
  call check(all(transfer(out, 1_int64, size(out)) == transfer(reference(first + 1:first + n, :), 1_int64, size(out))), &
             'seg: distributed == one process, bitwise')
  call surrogate_close(single, ierr)
  call surrogate_close(s, ierr)

  ! Classification: 40 values per sample on every rank.
  call surrogate_open(s, world, trim(cls_model), ierr, threads=1)
  call expect_ok(ierr, 'open cls')
  k_in = surrogate_sample_in_channels(s, ierr)
  k_out = surrogate_sample_out_channels(s, ierr)
  k_point = surrogate_out_channels(s, ierr)
  call check(k_in == 0 .and. k_out == 40 .and. k_point == 0, 'cls: 40 values per sample out, none per point')
  call surrogate_set_points(s, coords, ierr, sample_ids=samples)
  allocate (none(n, 0))
  call surrogate_predict(s, coords, none, ierr)
  call expect_ok(ierr, 'cls predict')
  call surrogate_get_sample_outputs(s, logits, ierr)
  call expect_ok(ierr, 'cls get_sample_outputs')
  call surrogate_get_sample_outputs(s, logits_t, ierr, layout=SURROGATE_COMPONENTS_FIRST)
  call expect_ok(ierr, 'cls get_sample_outputs (components first)')
  call check(all(transpose(logits_t) == logits), 'cls: both layouts agree')
  call surrogate_open(single, MPI_COMM_SELF, trim(cls_model), ierr, threads=1)
  deallocate (none)
  allocate (none(n_global, 0))
  call surrogate_set_points(single, all_coords, ierr, sample_ids=all_samples)
  call surrogate_predict(single, all_coords, none, ierr)
  call surrogate_get_sample_outputs(single, logits_ref, ierr)
  call expect_ok(ierr, 'cls (one process)')
  call check(all(transfer(logits, 1_int64, 80) == transfer(logits_ref, 1_int64, 80)), 'cls: == one process, bitwise')
  logits_root = logits
  call MPI_Bcast(logits_root, 80, MPI_DOUBLE_PRECISION, 0, world, mpierr)
  call check(all(logits_root == logits), 'cls: the same on every rank')
  call surrogate_close(single, ierr)
  call surrogate_close(s, ierr)
  call finish()
  if (failures /= 0) stop 1

contains

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
    if (rank == 0) write (*, '(a,i0,a,a,a,i0,a)') 'test_fortran_samples on ', nranks, ' rank(s): ', &
      merge('passed', 'FAILED', total == 0), ' (', total, ' failures)'
    failures = total
    call MPI_Finalize(mpierr)
  end subroutine finish

end program test_fortran_samples
