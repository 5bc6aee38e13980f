! Predicts three points with an installed surrogate (Fortran module).
program consumer_f
  use mpi_f08
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  type(surrogate_t) :: s
  real(real64) :: xy(3, 2), y(3, 1)
  character(len=1024) :: model
  integer :: ierr

  call MPI_Init()
  call get_command_argument(1, model)
  xy(:, 1) = [0.1_real64, 0.5_real64, 0.9_real64]
  xy(:, 2) = [0.2_real64, 0.5_real64, 0.3_real64]
  call surrogate_open(s, MPI_COMM_WORLD, trim(model), ierr)
  if (ierr == SURROGATE_OK) call surrogate_set_points(s, xy, ierr)
  if (ierr == SURROGATE_OK) call surrogate_predict(s, xy, y, ierr)
  if (ierr /= SURROGATE_OK) then
    print '(2a)', 'consumer_f: ', surrogate_last_error()
  else
    print '(3a, 3f10.6)', 'consumer_f: surrogate ', surrogate_version(), ', predictions', y(:, 1)
  end if
  call surrogate_close(s, ierr)
  call MPI_Finalize()
  if (ierr /= SURROGATE_OK) error stop 1
end program consumer_f
