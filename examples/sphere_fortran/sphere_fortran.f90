! sphere_fortran: a Fortran MPI solver on a latitude-longitude grid of the sphere, split in latitude bands,
! that calls a spherical surrogate (torch-harmonics' SphericalTransformer, trained on this solver's own
! steps) through the `surrogate` module every step and writes VTK of the sphere (see README.md next to
! this file).
!
! The solver: a tracer q advected by a solid-body rotation about an axis tilted by alpha = pi/2 - 0.05 from
! the polar axis (Williamson et al. 1992, test case 1: the flow passes nearly over the poles) with a
! little diffusion, kappa = 1e-3, on the unit sphere; initial state Williamson's cosine bell. Finite volumes
! on the 33 x 64 equiangular grid of torch-harmonics (row 0 = north pole, row 32 = south pole, both poles
! on the grid): the cells are centred on the grid points, each pole row is one polar cap whose value all
! its 64 points carry. The velocity enters through a stream function (psi = Omega . r): the flux through a
! face is the difference of psi at its ends, so the discrete divergence is exactly zero and the mass is
! conserved to rounding. Fluxes: first-order upwind advection plus diffusion; time: 10 Heun (SSP-RK2)
! substeps per solver step dt = 0.05 (the polar rows set the limit; the largest forward-Euler Courant
! number is printed). share/training/sphere_solver.py is the same scheme in NumPy (the training data).
!
! Each step n -> n+1:
!   1. the solver advances q^n to q^{n+1} (halo rows exchanged with the neighbouring bands each stage);
!   2. the surrogate predicts the increment dq from q^n (default), or from its own previous prediction
!      (--rollout), and the prediction of q^{n+1} is the input plus dq;
!   3. the relative L2 errors of the prediction against the solver, over the grid points, are printed:
!      of the state and of the increment q^{n+1} - q^n;
!   4. VTK: the sphere with the solver field, the prediction and their difference.
!
!   mpirun -n 3 ./surrogate_sphere_fortran [--model sphere.h5] [--steps 60] [--rollout]
!        [--output sphere_fortran_output] [--vtk-every 1] [--threads 0]
program sphere_fortran
  use mpi_f08
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real64, error_unit
  implicit none

  ! The grid (the model's img_size) and the problem (share/training/sphere_solver.py holds the same values).
  integer, parameter :: nlat = 33, nlon = 64
  real(real64), parameter :: pi = 3.141592653589793238_real64
  real(real64), parameter :: alpha = 0.5_real64 * pi - 0.05_real64 ! tilt of the rotation axis
  real(real64), parameter :: u0 = 1                                ! angular speed: one turn in 2 pi
  real(real64), parameter :: kappa = 1.0e-3_real64                 ! diffusivity
  real(real64), parameter :: dt = 0.05_real64                      ! solver step = surrogate step
  integer, parameter :: substeps = 10                              ! Heun substeps per step
  real(real64), parameter :: bell_radius = 1.0_real64 / 3, bell_lon = 1.5_real64 * pi, bell_lat = 0

  ! Options
  character(len=1024) :: model_path, output_dir
  integer :: n_steps, vtk_every, threads
  logical :: rollout

  ! MPI and the latitude band of this rank: global rows row_first .. row_last (0-based, inclusive)
  integer :: rank, nranks, north, south, row_first, row_last, n_rows, n_local
  ! Geometry of the whole grid (small; every rank holds it)
  real(real64) :: dtheta, dlambda, theta(0:nlat - 1), lambda(0:nlon - 1), area(0:nlat - 1)
  real(real64) :: d_merid(0:nlat - 2), d_zonal(0:nlat - 1)
  real(real64) :: g(0:nlon - 1, 0:nlat - 2) ! southward volume flux through the face below row i
  real(real64) :: f(0:nlon - 1, 0:nlat - 1) ! eastward volume flux through the east face of cell (i, j)
  ! The band's fields with one halo row on each side: (longitude, row_first-1 : row_last+1)
  real(real64), allocatable :: q(:, :), q_old(:, :), q_stage(:, :), tendency_q(:, :), predicted_band(:, :)
  ! The surrogate's arrays: (n_local, 1), row-major (latitude, longitude) as the model wants
  real(real64), allocatable, target :: xyz(:, :), model_input(:, :), increment(:, :), predicted(:, :)
  ! VTK: the band's points plus the first row of the band below (to close the cells between the bands)
  type(surrogate_vtk_t) :: vtk
  integer :: n_vtk_rows, n_vtk
  real(real64), allocatable, target :: vtk_xyz(:, :), vtk_solver(:), vtk_prediction(:), vtk_error(:), vtk_rank(:)

  type(surrogate_t) :: s
  integer :: ierr, step, i
  real(real64) :: t, t0, t_solver, t_predict, sums(4), errors(2), worst(2), mean(2), elapsed(2), mass, mass0
  real(real64) :: digest_solver(2), digest_prediction(2)

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call parse_arguments()
  if (nranks > nlat) then
    if (rank == 0) write (error_unit, '(a, i0, a)') 'sphere_fortran: at most ', nlat, ' ranks (one latitude row each)'
    call MPI_Finalize()
    stop 2
  end if

  ! --- The band: consecutive rows in rank order (the surrogate's point order: rank order, row-major) -------
  row_first = nlat * rank / nranks
  row_last = nlat * (rank + 1) / nranks - 1
  n_rows = row_last - row_first + 1
  n_local = n_rows * nlon
  north = merge(MPI_PROC_NULL, rank - 1, rank == 0)
  south = merge(MPI_PROC_NULL, rank + 1, rank == nranks - 1)
  allocate (q(0:nlon - 1, row_first - 1:row_last + 1))
  allocate (q_old, q_stage, tendency_q, predicted_band, mold=q) ! the same bounds
  q = 0
  q_stage = 0
  predicted_band = 0
  allocate (xyz(n_local, 3), model_input(n_local, 1), increment(n_local, 1), predicted(n_local, 1))

  call geometry()
  call initial_state()
  do i = row_first, row_last
    xyz((i - row_first) * nlon + 1:(i - row_first + 1) * nlon, :) = unit_vectors(i)
  end do

  ! --- The surrogate -------------------------------------------------------------------------------
  call surrogate_open(s, MPI_COMM_WORLD, trim(model_path), ierr, threads=threads)
  call stop_on_error(ierr, 'surrogate_open('//trim(model_path)//')')
  call surrogate_set_points(s, xyz, ierr) ! the unit vectors; the spherical models use the point order
  call stop_on_error(ierr, 'surrogate_set_points')
  if (rank == 0) call print_header()
  mass0 = total_mass(q)
  mass = mass0

  if (vtk_every > 0) call open_vtk()

  ! --- The time loop ------------------------------------------------------------------------------
  if (rank == 0) write (*, '(a)') ' step    time  rel. L2 state  rel. L2 increment  max |error|  mass change  ' // &
                                  'solver [ms]  predict [ms]'
  worst = 0
  mean = 0
  elapsed = 0
  do step = 1, n_steps
    t = step * dt
    ! The surrogate's input: the solver's state before the step, or its own last prediction.
    if (step == 1 .or. .not. rollout) then
      model_input(:, 1) = reshape(q(:, row_first:row_last), [n_local])
    else
      model_input = predicted
    end if
    q_old = q

    ! 1. The solver.
    t0 = MPI_Wtime()
    call advance()
    t_solver = MPI_Wtime() - t0

    ! 2. The surrogate: the increment over the step.
    t0 = MPI_Wtime()
    call surrogate_predict(s, model_input, increment, ierr)
    call stop_on_error(ierr, 'surrogate_predict')
    t_predict = MPI_Wtime() - t0
    predicted = model_input + increment
    predicted_band(:, row_first:row_last) = reshape(predicted(:, 1), [nlon, n_rows])

    ! 3. Errors over the whole grid (sums over the grid points, as the training reports them).
    sums(1) = sum((predicted_band(:, row_first:row_last) - q(:, row_first:row_last))**2)
    sums(2) = sum(q(:, row_first:row_last)**2)
    sums(3) = sum((q(:, row_first:row_last) - q_old(:, row_first:row_last))**2)
    sums(4) = maxval(abs(predicted_band(:, row_first:row_last) - q(:, row_first:row_last)))
    call MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    call MPI_Allreduce(MPI_IN_PLACE, sums(4), 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    call MPI_Allreduce(MPI_IN_PLACE, t_solver, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    call MPI_Allreduce(MPI_IN_PLACE, t_predict, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    errors = [sqrt(sums(1) / sums(2)), sqrt(sums(1) / sums(3))]
    worst = max(worst, errors)
    mean = mean + errors / n_steps
    elapsed = elapsed + [t_solver, t_predict] / n_steps
    mass = total_mass(q)
    if (rank == 0) write (*, '(i5, f8.3, f15.6, f19.5, es13.3, es13.2, f13.3, f14.3)') step, t, errors, sums(4), &
      mass / mass0 - 1, 1e3_real64 * t_solver, 1e3_real64 * t_predict

    ! 4. VTK.
    if (vtk_every > 0) then
      if (mod(step, vtk_every) == 0) call write_vtk()
    end if
  end do

  call digests()
  if (rank == 0) then
    write (*, '(a)') ''
    write (*, '(a, i0, a, 2es24.16)') 'solver digest (sum of q, sum of q^2 at step ', n_steps, '): ', digest_solver
    write (*, '(a, 2es24.16)') 'prediction digest (sum of q, sum of q^2 at the last step): ', digest_prediction
    write (*, '(a, i0, a, f9.6, a, f8.5)') 'max relative L2 error over ', n_steps, ' steps: state ', worst(1), &
      '  increment ', worst(2)
    write (*, '(a, f9.6, a, f8.5)') 'mean relative L2 error:             state ', mean(1), '  increment ', mean(2)
    write (*, '(a, es10.2)') 'relative mass change of the solver: ', mass / mass0 - 1
    write (*, '(a, f9.3, a, f9.3, a)') 'mean time per step: solver ', 1e3_real64 * elapsed(1), ' ms, predict ', &
      1e3_real64 * elapsed(2), ' ms (slowest rank)'
    if (vtk_every > 0) write (*, '(3a)') 'VTK series: ', trim(output_dir), '/sphere.pvd'
  end if

  if (vtk_every > 0) then
    call surrogate_vtk_close(vtk, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_close')
  end if
  call surrogate_close(s, ierr)
  call stop_on_error(ierr, 'surrogate_close')
  call MPI_Finalize()

contains

  ! --------------------------------------------------------------------------------------------------
  ! The finite-volume scheme
  ! --------------------------------------------------------------------------------------------------

  !> Stream function of the rotation Omega = u0 (-sin alpha, 0, cos alpha): psi = Omega . r.
  pure real(real64) function psi(colatitude, longitude)
    real(real64), intent(in) :: colatitude, longitude
    psi = u0 * (-sin(alpha) * sin(colatitude) * cos(longitude) + cos(alpha) * cos(colatitude))
  end function psi

  !> Cell areas, face fluxes and diffusion coefficients of the whole grid.
  subroutine geometry()
    integer :: ii, j
    real(real64) :: face, north_face, south_face, east, west
    dtheta = pi / (nlat - 1)
    dlambda = 2 * pi / nlon
    do ii = 0, nlat - 1
      theta(ii) = ii * dtheta
    end do
    do j = 0, nlon - 1
      lambda(j) = j * dlambda
    end do
    do ii = 0, nlat - 2
      face = (ii + 0.5_real64) * dtheta
      d_merid(ii) = kappa * sin(face) * dlambda / dtheta
      do j = 0, nlon - 1
        east = (j + 0.5_real64) * dlambda
        west = (j - 0.5_real64) * dlambda
        g(j, ii) = psi(face, east) - psi(face, west)
      end do
    end do
    f = 0
    d_zonal = 0
    do ii = 1, nlat - 2
      north_face = (ii - 0.5_real64) * dtheta
      south_face = (ii + 0.5_real64) * dtheta
      d_zonal(ii) = kappa * dtheta / (sin(theta(ii)) * dlambda)
      area(ii) = dlambda * (cos(north_face) - cos(south_face))
      do j = 0, nlon - 1
        east = (j + 0.5_real64) * dlambda
        f(j, ii) = psi(north_face, east) - psi(south_face, east)
      end do
    end do
    area(0) = 2 * pi * (1 - cos(0.5_real64 * dtheta))
    area(nlat - 1) = area(0)
  end subroutine geometry

  !> Williamson's cosine bell: 1/2 (1 + cos(pi r / R)) within great-circle distance R of its centre.
  subroutine initial_state()
    integer :: ii, j
    real(real64) :: centre(3), r, p(3)
    centre = [cos(bell_lat) * cos(bell_lon), cos(bell_lat) * sin(bell_lon), sin(bell_lat)]
    do ii = row_first, row_last
      do j = 0, nlon - 1
        p = [sin(theta(ii)) * cos(lambda(j)), sin(theta(ii)) * sin(lambda(j)), cos(theta(ii))]
        r = acos(max(-1.0_real64, min(1.0_real64, sum(p * centre))))
        q(j, ii) = merge(0.5_real64 * (1 + cos(pi * r / bell_radius)), 0.0_real64, r < bell_radius)
      end do
    end do
  end subroutine initial_state

  !> The unit vectors of row ii: (nlon, 3).
  function unit_vectors(ii) result(p)
    integer, intent(in) :: ii
    real(real64) :: p(nlon, 3)
    p(:, 1) = sin(theta(ii)) * cos(lambda)
    p(:, 2) = sin(theta(ii)) * sin(lambda)
    p(:, 3) = cos(theta(ii))
  end function unit_vectors

  !> One solver step: `substeps` Heun steps, halo rows exchanged before each stage.
  subroutine advance()
    integer :: k
    real(real64) :: h
    h = dt / substeps
    do k = 1, substeps
      call exchange_halo(q)
      call tendency(q, tendency_q)
      q_stage(:, row_first:row_last) = q(:, row_first:row_last) + h * tendency_q(:, row_first:row_last)
      call exchange_halo(q_stage)
      call tendency(q_stage, tendency_q)
      q(:, row_first:row_last) = 0.5_real64 * q(:, row_first:row_last) + &
                                 0.5_real64 * (q_stage(:, row_first:row_last) + h * tendency_q(:, row_first:row_last))
    end do
    call exchange_halo(q)
  end subroutine advance

  !> dq/dt on the band's rows: upwind advective plus diffusive fluxes through the cell faces, divided by
  !> the cell areas; a polar cap takes the sum over its nlon faces.
  subroutine tendency(u, du)
    real(real64), intent(in) :: u(0:, row_first - 1:)
    real(real64), intent(out) :: du(0:, row_first - 1:)
    real(real64) :: south_flux(0:nlon - 1, row_first - 1:row_last), east_flux(0:nlon - 1)
    integer :: ii, j, jp
    ! Southward flux through the face below row ii, for the faces that touch the band.
    do ii = max(row_first - 1, 0), min(row_last, nlat - 2)
      do j = 0, nlon - 1
        south_flux(j, ii) = max(g(j, ii), 0.0_real64) * u(j, ii) + min(g(j, ii), 0.0_real64) * u(j, ii + 1) - &
                            d_merid(ii) * (u(j, ii + 1) - u(j, ii))
      end do
    end do
    du = 0
    do ii = row_first, row_last
      if (ii == 0) then
        du(:, ii) = -sum(south_flux(:, 0)) / area(0)
      else if (ii == nlat - 1) then
        du(:, ii) = sum(south_flux(:, nlat - 2)) / area(nlat - 1)
      else
        do j = 0, nlon - 1
          jp = modulo(j + 1, nlon)
          east_flux(j) = max(f(j, ii), 0.0_real64) * u(j, ii) + min(f(j, ii), 0.0_real64) * u(jp, ii) - &
                         d_zonal(ii) * (u(jp, ii) - u(j, ii))
        end do
        do j = 0, nlon - 1
          du(j, ii) = (south_flux(j, ii - 1) - south_flux(j, ii) + east_flux(modulo(j - 1, nlon)) - east_flux(j)) / &
                      area(ii)
        end do
      end if
    end do
  end subroutine tendency

  !> The first and last rows of the band to the neighbouring bands' halo rows.
  subroutine exchange_halo(u)
    real(real64), intent(inout) :: u(0:, row_first - 1:)
    type(MPI_Comm) :: comm
    type(MPI_Status) :: status
    comm = MPI_COMM_WORLD
    ! to the north, from the south
    call MPI_Sendrecv(u(:, row_first), nlon, MPI_DOUBLE_PRECISION, north, 1, u(:, row_last + 1), nlon, &
                      MPI_DOUBLE_PRECISION, south, 1, comm, status)
    ! to the south, from the north
    call MPI_Sendrecv(u(:, row_last), nlon, MPI_DOUBLE_PRECISION, south, 2, u(:, row_first - 1), nlon, &
                      MPI_DOUBLE_PRECISION, north, 2, comm, status)
  end subroutine exchange_halo

  !> The integral of q over the sphere (cell areas; the caps counted once).
  real(real64) function total_mass(u)
    real(real64), intent(in) :: u(0:, row_first - 1:)
    integer :: ii
    total_mass = 0
    do ii = row_first, row_last
      if (ii == 0 .or. ii == nlat - 1) then
        total_mass = total_mass + u(0, ii) * area(ii)
      else
        total_mass = total_mass + sum(u(:, ii)) * area(ii)
      end if
    end do
    call MPI_Allreduce(MPI_IN_PLACE, total_mass, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  end function total_mass

  !> Sums over the whole grid in global point order on rank 0 (gathered), so that they do not depend on
  !> the number of ranks: the solver's state and the last prediction are the same bits for any band split.
  subroutine digests()
    real(real64), allocatable :: whole(:), band(:)
    integer, allocatable :: counts(:), displs(:)
    integer :: r
    allocate (whole(nlat * nlon), counts(nranks), displs(nranks), band(n_local))
    do r = 0, nranks - 1
      displs(r + 1) = (nlat * r / nranks) * nlon
      counts(r + 1) = (nlat * (r + 1) / nranks) * nlon - displs(r + 1)
    end do
    band = reshape(q(:, row_first:row_last), [n_local])
    call MPI_Gatherv(band, n_local, MPI_DOUBLE_PRECISION, whole, counts, displs, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD)
    digest_solver = [sum_in_order(whole), sum_in_order(whole**2)]
    call MPI_Gatherv(predicted(:, 1), n_local, MPI_DOUBLE_PRECISION, whole, counts, displs, MPI_DOUBLE_PRECISION, 0, &
                     MPI_COMM_WORLD)
    digest_prediction = [sum_in_order(whole), sum_in_order(whole**2)]
  end subroutine digests

  !> A plain left-to-right sum (the intrinsic's order is the compiler's business).
  real(real64) function sum_in_order(values)
    real(real64), intent(in) :: values(:)
    integer :: k
    sum_in_order = 0
    do k = 1, size(values)
      sum_in_order = sum_in_order + values(k)
    end do
  end function sum_in_order

  ! --------------------------------------------------------------------------------------------------
  ! VTK: points on the unit sphere, quads between neighbouring rows and columns (the seam wrapped),
  ! triangles from each point of a pole row to the two next points of its neighbour row
  ! --------------------------------------------------------------------------------------------------

  subroutine open_vtk()
    integer, allocatable :: connectivity(:), offsets(:), types(:)
    integer :: n_cells, ii, j, jp, a, b, c
    ! The band's rows plus the first row of the band below (its owner's values, from the halo).
    n_vtk_rows = n_rows + merge(1, 0, rank < nranks - 1)
    n_vtk = n_vtk_rows * nlon
    allocate (vtk_xyz(n_vtk, 3), vtk_solver(n_vtk), vtk_prediction(n_vtk), vtk_error(n_vtk), vtk_rank(n_vtk))
    do ii = 0, n_vtk_rows - 1
      vtk_xyz(ii * nlon + 1:(ii + 1) * nlon, :) = unit_vectors(row_first + ii)
    end do
    vtk_rank = rank
    ! Cells between local rows ii and ii+1 (1-based point numbers: row ii starts at ii*nlon + 1).
    n_cells = (n_vtk_rows - 1) * nlon
    allocate (connectivity(4 * n_cells), offsets(n_cells), types(n_cells))
    c = 0
    a = 0
    do ii = 0, n_vtk_rows - 2
      do j = 0, nlon - 1
        jp = modulo(j + 1, nlon)
        c = c + 1
        b = ii * nlon + 1 ! first point of the northern row
        if (row_first + ii == 0) then
          ! north pole row: the pole point j and the edge j -> j+1 of the row below
          connectivity(a + 1:a + 3) = [b + j, b + nlon + j, b + nlon + jp]
          types(c) = SURROGATE_VTK_TRIANGLE
          a = a + 3
        else if (row_first + ii + 1 == nlat - 1) then
          ! south pole row below: the edge j -> j+1 of this row and the pole point j
          connectivity(a + 1:a + 3) = [b + j, b + nlon + j, b + jp]
          types(c) = SURROGATE_VTK_TRIANGLE
          a = a + 3
        else
          connectivity(a + 1:a + 4) = [b + j, b + nlon + j, b + nlon + jp, b + jp]
          types(c) = SURROGATE_VTK_QUAD
          a = a + 4
        end if
        offsets(c) = a
      end do
    end do
    call surrogate_vtk_open(vtk, MPI_COMM_WORLD, trim(output_dir), 'sphere', ierr)
    call stop_on_error(ierr, 'surrogate_vtk_open')
    call surrogate_vtk_set_cells(vtk, connectivity(1:a), offsets, types, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_set_cells')
  end subroutine open_vtk

  !> Solver field, prediction, difference and owner of the band's rows and of the halo row below.
  subroutine write_vtk()
    call exchange_halo(predicted_band) ! q's halo is current (advance ends with an exchange)
    vtk_solver = reshape(q(:, row_first:row_first + n_vtk_rows - 1), [n_vtk])
    vtk_prediction = reshape(predicted_band(:, row_first:row_first + n_vtk_rows - 1), [n_vtk])
    vtk_error = vtk_prediction - vtk_solver
    call surrogate_vtk_add_array(vtk, 'q_solver', vtk_solver, ierr, unit='1')
    call surrogate_vtk_add_array(vtk, 'q_surrogate', vtk_prediction, ierr, unit='1')
    call surrogate_vtk_add_array(vtk, 'q_error', vtk_error, ierr, unit='1')
    call surrogate_vtk_add_array(vtk, 'rank', vtk_rank, ierr)
    call surrogate_vtk_write(vtk, t, vtk_xyz, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_write')
  end subroutine write_vtk

  ! --------------------------------------------------------------------------------------------------
  ! Output and command line
  ! --------------------------------------------------------------------------------------------------

  subroutine print_header()
    real(real64) :: courant
    courant = max_courant()
    write (*, '(a)') 'sphere_fortran: tracer advected by a tilted solid-body rotation (Williamson test case 1) ' // &
      'with diffusion, predicted by a spherical surrogate'
    write (*, '(4a)') '  model       ', trim(model_path), ', architecture ', surrogate_architecture(s, ierr)
    write (*, '(a, i0, a, i0, a, i0, a, i0, a, i0, a)') '  grid        ', nlat, ' x ', nlon, &
      ' equiangular (poles included), ', nranks, ' latitude band(s) of ', nlat / nranks, ' to ', &
      (nlat + nranks - 1) / nranks, ' rows'
    write (*, '(a, f7.4, a, f4.1, a, es8.1, a, f5.3, a, i0, a, f6.3, a)') '  problem     alpha ', alpha, ', u0 ', u0, &
      ', kappa ', kappa, ', dt ', dt, ' (', substeps, ' Heun substeps, largest Courant number ', courant, ')'
    write (*, '(a, i0, a)') '  surrogate   ', n_steps, merge(' steps, rolled out from the initial state    ', &
                                                             ' steps, each from the solver''s previous state', rollout)
    write (*, '(a)') ''
  end subroutine print_header

  !> Largest h * (outgoing advective flux + diffusion coefficients) / area over the cells: the forward-Euler
  !> stages are positive and monotone when it is <= 1.
  real(real64) function max_courant()
    real(real64) :: out(0:nlon - 1, 0:nlat - 1), h
    integer :: ii
    h = dt / substeps
    out = 0
    do ii = 0, nlat - 2
      out(:, ii) = out(:, ii) + max(g(:, ii), 0.0_real64) + d_merid(ii)
      out(:, ii + 1) = out(:, ii + 1) + max(-g(:, ii), 0.0_real64) + d_merid(ii)
    end do
    do ii = 1, nlat - 2
      out(:, ii) = out(:, ii) + max(f(:, ii), 0.0_real64) + max(-cshift(f(:, ii), -1), 0.0_real64) + 2 * d_zonal(ii)
    end do
    out(:, 0) = sum(out(:, 0))
    out(:, nlat - 1) = sum(out(:, nlat - 1))
    do ii = 0, nlat - 1
      out(:, ii) = h * out(:, ii) / area(ii)
    end do
    max_courant = maxval(out)
  end function max_courant

  !> Collective calls return the same ierr on every rank, so every rank stops here together.
  subroutine stop_on_error(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    if (status == SURROGATE_OK) return
    if (rank == 0) write (error_unit, '(4a)') 'sphere_fortran: ', what, ' failed: ', surrogate_last_error()
    call MPI_Finalize()
    stop 1
  end subroutine stop_on_error

  subroutine parse_arguments()
    character(len=1024) :: arg, value
    integer :: k, ios
    model_path = 'sphere.h5'
    output_dir = 'sphere_fortran_output'
    n_steps = 60
    vtk_every = 1
    threads = 0
    rollout = .false.
    k = 1
    do while (k <= command_argument_count())
      call get_command_argument(k, arg)
      if (trim(arg) == '--help' .or. trim(arg) == '-h') then
        if (rank == 0) call usage()
        call MPI_Finalize()
        stop
      end if
      if (trim(arg) == '--rollout') then
        rollout = .true.
        k = k + 1
        cycle
      end if
      if (k == command_argument_count()) call bad_argument('option '//trim(arg)//' needs a value')
      call get_command_argument(k + 1, value)
      ios = 0
      select case (trim(arg))
      case ('--model')
        model_path = value
      case ('--output')
        output_dir = value
      case ('--steps')
        read (value, *, iostat=ios) n_steps
        if (ios == 0 .and. n_steps < 1) ios = 1
      case ('--vtk-every')
        read (value, *, iostat=ios) vtk_every
        if (ios == 0 .and. vtk_every < 0) ios = 1
      case ('--threads')
        read (value, *, iostat=ios) threads
        if (ios == 0 .and. threads < 0) ios = 1
      case default
        call bad_argument('unknown option '//trim(arg))
      end select
      if (ios /= 0) call bad_argument('bad value '''//trim(value)//''' for '//trim(arg))
      k = k + 2
    end do
  end subroutine parse_arguments

  subroutine bad_argument(message)
    character(len=*), intent(in) :: message
    if (rank == 0) then
      write (error_unit, '(2a)') 'sphere_fortran: ', message
      call usage()
    end if
    call MPI_Finalize()
    stop 2
  end subroutine bad_argument

  subroutine usage()
    write (*, '(a)') 'usage: mpirun -n P surrogate_sphere_fortran [options]   (P <= 33 latitude bands)'
    write (*, '(a)') '  --model FILE      the spherical model file (default sphere.h5)'
    write (*, '(a)') '  --steps N         solver steps of 0.05 (default 60; 126 is one revolution)'
    write (*, '(a)') '  --rollout         the surrogate predicts from its own previous prediction (default: from'
    write (*, '(a)') '                    the solver''s previous state)'
    write (*, '(a)') '  --output DIR      VTK output directory (default sphere_fortran_output)'
    write (*, '(a)') '  --vtk-every K     write VTK every K steps, 0 = never (default 1)'
    write (*, '(a)') '  --threads N       OpenMP threads per rank, 0 = OMP_NUM_THREADS (default 0)'
  end subroutine usage

end program sphere_fortran
