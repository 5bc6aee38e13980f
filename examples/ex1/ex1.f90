! ex1 in Fortran: the smallest complete use of the library. A tracer q on the sphere, split over the ranks
! in latitude bands, is advanced by a learned spherical surrogate (share/models/sphere): every step
! q <- q + dq(q), and the field goes to a ParaView time series. The same program in C++: ex1.cpp.
!   mpirun -np 3 ex1_fortran [model.h5 [steps [output directory]]]    (defaults: sphere.h5, 10, ex1_output)
program ex1
  use mpi_f08
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real64, error_unit
  implicit none
  integer, parameter :: nlat = 33, nlon = 64
  real(real64), parameter :: pi = 3.141592653589793238_real64, dt = 0.05_real64, radius = 1.0_real64 / 3
  type(surrogate_t) :: model
  type(surrogate_vtk_t) :: vtk
  character(len=4096) :: model_path = 'sphere.h5', output = 'ex1_output', word
  integer :: rank, ranks, ierr, steps = 10, first, last, n, i, j, k, step
  real(real64), allocatable :: xyz(:, :), q(:, :), dq(:, :)
  real(real64) :: theta, lambda, c(3), r, sums(2), max_q
  logical :: vtk_open

  ! 1. Initialise MPI and read the command line.
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  if (command_argument_count() >= 1) call get_command_argument(1, model_path)
  if (command_argument_count() >= 2) then
    call get_command_argument(2, word)
    read (word, *) steps
  end if
  if (command_argument_count() >= 3) call get_command_argument(3, output)

  ! 2. Open the model: collective, rank 0 reads the file and sends it to the others.
  call surrogate_open(model, MPI_COMM_WORLD, trim(model_path), ierr)
  call check(ierr)

  ! 3. The rank's points: whole rows of the model's 33 x 64 latitude-longitude grid, the bands in rank
  !    order (the point order the spherical models want), as unit vectors xyz(n, 3).
  first = nlat * rank / ranks
  last = nlat * (rank + 1) / ranks
  n = (last - first) * nlon
  allocate (xyz(n, 3), q(n, 1), dq(n, 1))
  do i = first, last - 1
    do j = 0, nlon - 1
      theta = i * (pi / (nlat - 1))
      lambda = j * (2 * pi / nlon)
      k = (i - first) * nlon + j + 1
      xyz(k, :) = [sin(theta) * cos(lambda), sin(theta) * sin(lambda), cos(theta)]
    end do
  end do
  call surrogate_set_points(model, xyz, ierr)
  call check(ierr)

  ! 4. The initial field: Williamson's cosine bell, 1/2 (1 + cos(pi r / R)) within the great-circle
  !    distance r < R = 1/3 of the point c at longitude 3 pi / 2 on the equator.
  c = [cos(1.5_real64 * pi), sin(1.5_real64 * pi), 0.0_real64]
  do k = 1, n
    r = acos(max(-1.0_real64, min(1.0_real64, xyz(k, 1) * c(1) + xyz(k, 2) * c(2) + xyz(k, 3) * c(3))))
    q(k, 1) = merge(0.5_real64 * (1 + cos(pi * r / radius)), 0.0_real64, r < radius)
  end do

  ! 5. The time loop: predict the increment (collective), update the field, write it for ParaView.
  call surrogate_vtk_open(vtk, MPI_COMM_WORLD, trim(output), 'ex1', ierr)
  vtk_open = ierr == SURROGATE_OK
  if (ierr /= SURROGATE_ERR_UNSUPPORTED) call check(ierr)  ! unsupported: a build without VTK
  if (rank == 0) write (*, '(a, a, a, i0, a)') 'ex1: ', trim(model_path), ' on ', ranks, ' rank(s)'
  if (rank == 0) write (*, '(a5, a8, 2a23, a13)') 'step', 'time', 'sum of q', 'sum of q^2', 'max q'
  do step = 1, steps
    call surrogate_predict(model, q, dq, ierr)
    call check(ierr)
    q = q + dq
    sums = [sum(q), sum(q**2)]
    max_q = maxval(q)
    call MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    call MPI_Allreduce(MPI_IN_PLACE, max_q, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    if (rank == 0) write (*, '(i5, f8.3, 2es23.15, f13.6)') step, step * dt, sums, max_q
    if (vtk_open) then
      call surrogate_vtk_add_array(vtk, 'q', q, ierr, unit='1')
      call check(ierr)
      call surrogate_vtk_write(vtk, step * dt, model, ierr)  ! collective; the points given to set_points
      call check(ierr)
    end if
  end do
  if (rank == 0 .and. vtk_open) write (*, '(3a)') 'ParaView: ', trim(output), '/ex1.pvd'

  ! 6. Close: collective, like opening.
  if (vtk_open) call surrogate_vtk_close(vtk, ierr)
  call surrogate_close(model, ierr)
  call MPI_Finalize()

contains

  ! Errors are agreed: every rank gets the same ierr and message, so every rank stops here.
  subroutine check(status)
    integer, intent(in) :: status
    if (status == SURROGATE_OK) return
    if (rank == 0) write (error_unit, '(2a)') 'ex1: ', surrogate_last_error()
    call MPI_Finalize()
    error stop 1
  end subroutine check
end program ex1
