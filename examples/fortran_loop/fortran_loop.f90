! fortran_loop: a small MPI solver written in Fortran that calls a learned surrogate through the
! `surrogate` module every time step and writes VTK through it (see README.md next to this file).
!
! The "solver": a circular cylinder (radius 0.25 m) oscillates slowly across the window
! [-2, 2] x [-1, 1] m in a uniform stream U = 1 m/s along +x; a blob of massless particles released
! upstream is carried by the flow. Each step the geometry has changed, so the solver
!   1. samples its point cloud around the cylinder's new position the way the model's training clouds
!      were sampled (share/training/potential_flow.py: a third of the points in the band
!      R <= r <= 1.4 R, the rest uniform over the fluid), partitioned over the ranks;
!   2. hands the points to the surrogate (surrogate_set_points) and predicts (u, v, Cp) on them
!      (surrogate_predict);
!   3. compares the prediction with the closed-form potential flow (its "solver field") and prints the
!      relative L2 errors and the time spent in predict;
!   4. interpolates the predicted velocity to its particles (inverse-distance weighting among the 6
!      nearest cloud points) and advances them with a second-order Runge-Kutta (Heun) step;
!   5. writes two VTK series: the cloud (solver field, prediction, difference, owning rank) and the
!      particles.
! The flow is taken as quasi-steady (the potential flow past the cylinder at its current position).
!
! Random numbers come from a counter-based hash of (seed, step, point index, draw), so every rank
! draws the same cloud whatever the number of ranks: the run is deterministic and its output does not
! depend on the partition.
!
!   mpirun -n 3 ./surrogate_fortran_loop [--model potential_flow.h5] [--steps 100] [--points 2000 |
!        --points-per-rank N] [--particles 600] [--dt 0.05] [--output fortran_loop_output]
!        [--vtk-every 1] [--seed 2024] [--threads 0]
program fortran_loop
  use mpi_f08
  use surrogate
  use, intrinsic :: iso_fortran_env, only: real64, int64, error_unit
  implicit none

  real(real64), parameter :: pi = 3.141592653589793238_real64
  real(real64), parameter :: x_min = -2, x_max = 2, y_min = -1, y_max = 1 ! window, m
  real(real64), parameter :: u_inf = 1                                    ! free stream, m/s
  real(real64), parameter :: band_width = 0.4_real64                      ! band R <= r <= 1.4 R
  ! The cylinder: radius, mean centre, amplitude and period of its motion across the stream.
  real(real64), parameter :: radius = 0.25_real64, centre_x = -0.5_real64, amplitude = 0.35_real64
  real(real64), parameter :: period = 8.0_real64
  ! The particle blob: centre and radius at release.
  real(real64), parameter :: blob_x = -1.6_real64, blob_y = 0.2_real64, blob_radius = 0.3_real64
  integer, parameter :: neighbours = 6
  integer(int64), parameter :: mask32 = 4294967295_int64                  ! 2**32 - 1

  ! Options
  character(len=1024) :: model_path, output_dir
  integer :: n_steps, n_total, n_per_rank, n_particles, vtk_every, seed, threads
  real(real64) :: dt

  ! MPI
  integer :: rank, nranks
  ! Surrogate and VTK
  type(surrogate_t) :: s
  type(surrogate_vtk_t) :: cloud_vtk, particle_vtk
  integer :: ierr
  ! The rank's cloud points and fields
  integer :: n_local, first_point, n_particles_local, first_particle
  real(real64), allocatable, target :: xy(:, :), predicted(:, :), exact(:, :)
  real(real64), allocatable, target :: velocity_solver(:, :), velocity_surrogate(:, :), velocity_difference(:, :)
  real(real64), allocatable, target :: cp_solver(:), cp_difference(:), owner(:)
  ! The whole cloud with its predicted velocity (x, y, u, v), for the particles
  real(real64), allocatable :: field(:, :), packed(:, :)
  integer, allocatable :: counts(:), displs(:)
  ! Particles
  real(real64), allocatable, target :: particles(:, :), particle_velocity(:, :), particle_active(:)
  ! Step state
  integer :: step, i
  real(real64) :: t, cy, t0, t_predict, t_points, sums(5), errors(3), worst(3), mean(3), elapsed(2), digest(3)
  integer :: active
  character(len=:), allocatable :: text

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call parse_arguments()

  ! --- The surrogate ---------------------------------------------------------------------------------
  call surrogate_open(s, MPI_COMM_WORLD, trim(model_path), ierr, threads=threads)
  call stop_on_error(ierr, 'surrogate_open('//trim(model_path)//')')
  if (rank == 0) call print_header()

  ! --- This rank's share of the cloud and of the particles (contiguous blocks) ------------------------
  first_point = int(int(n_total, int64) * rank / nranks)
  n_local = int(int(n_total, int64) * (rank + 1) / nranks) - first_point
  first_particle = int(int(n_particles, int64) * rank / nranks)
  n_particles_local = int(int(n_particles, int64) * (rank + 1) / nranks) - first_particle
  allocate (xy(n_local, 2), predicted(n_local, 3), exact(n_local, 3))
  allocate (velocity_solver(n_local, 3), velocity_surrogate(n_local, 3), velocity_difference(n_local, 3))
  allocate (cp_solver(n_local), cp_difference(n_local), owner(n_local))
  owner = rank
  allocate (field(4, n_total), packed(4, n_local), counts(nranks), displs(nranks))
  call MPI_Allgather(4 * n_local, 1, MPI_INTEGER, counts, 1, MPI_INTEGER, MPI_COMM_WORLD)
  displs(1) = 0
  do i = 2, nranks
    displs(i) = displs(i - 1) + counts(i - 1)
  end do
  allocate (particles(n_particles_local, 2), particle_velocity(n_particles_local, 3), particle_active(n_particles_local))
  call release_particles()

  if (vtk_every > 0) then
    call surrogate_vtk_open(cloud_vtk, MPI_COMM_WORLD, trim(output_dir), 'cloud', ierr)
    call stop_on_error(ierr, 'surrogate_vtk_open(cloud)')
    call surrogate_vtk_open(particle_vtk, MPI_COMM_WORLD, trim(output_dir), 'particles', ierr)
    call stop_on_error(ierr, 'surrogate_vtk_open(particles)')
  end if

  ! --- The time loop ----------------------------------------------------------------------------------
  if (rank == 0) write (*, '(a)') ' step   time [s]  cylinder y [m]  rel. L2 (u,v)  rel. L2 (Cp)  ' // &
                                  'set_points [ms]  predict [ms]  particles'
  worst = 0
  mean = 0
  elapsed = 0
  do step = 0, n_steps - 1
    t = step * dt
    cy = amplitude * sin(2 * pi * t / period)

    ! 1. The cloud around the cylinder's new position.
    do i = 1, n_local
      xy(i, :) = cloud_point(first_point + i - 1, step, cy)
    end do

    ! 2. The surrogate: new points (the geometry changed), then the prediction (u, v, Cp).
    t0 = MPI_Wtime()
    call surrogate_set_points(s, xy, ierr)
    call stop_on_error(ierr, 'surrogate_set_points')
    t_points = MPI_Wtime() - t0
    t0 = MPI_Wtime()
    call surrogate_predict(s, xy, predicted, ierr)
    call stop_on_error(ierr, 'surrogate_predict')
    t_predict = MPI_Wtime() - t0
    call MPI_Allreduce(MPI_IN_PLACE, t_points, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    call MPI_Allreduce(MPI_IN_PLACE, t_predict, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)

    ! 3. The solver's field and the errors over the whole cloud.
    do i = 1, n_local
      exact(i, :) = potential_flow(xy(i, :), cy)
    end do
    sums(1) = sum((predicted(:, 1:2) - exact(:, 1:2))**2)
    sums(2) = sum(exact(:, 1:2)**2)
    sums(3) = sum((predicted(:, 3) - exact(:, 3))**2)
    sums(4) = sum(exact(:, 3)**2)
    sums(5) = sum((exact(:, 1) - u_inf)**2 + exact(:, 2)**2) ! the disturbance the cylinder causes
    call MPI_Allreduce(MPI_IN_PLACE, sums, 5, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    errors = [sqrt(sums(1) / sums(2)), sqrt(sums(3) / sums(4)), sqrt(sums(1) / sums(5))]
    worst = max(worst, errors)
    mean = mean + errors / n_steps
    elapsed = elapsed + [t_points, t_predict] / n_steps

    ! 4. The particles, in the predicted velocity field of the whole cloud.
    packed(1:2, :) = transpose(xy)
    packed(3:4, :) = transpose(predicted(:, 1:2))
    call MPI_Allgatherv(packed, 4 * n_local, MPI_DOUBLE_PRECISION, field, counts, displs, MPI_DOUBLE_PRECISION, &
                        MPI_COMM_WORLD)
    do i = 1, n_particles_local
      particle_velocity(i, 1:2) = interpolate(particles(i, :))
    end do
    particle_velocity(:, 3) = 0
    particle_velocity(:, 1) = particle_velocity(:, 1) * particle_active
    particle_velocity(:, 2) = particle_velocity(:, 2) * particle_active
    active = int(sum(particle_active))
    call MPI_Allreduce(MPI_IN_PLACE, active, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)

    if (rank == 0) write (*, '(i5, f11.3, f16.4, f15.5, f14.5, f17.3, f14.3, i11)') step, t, cy, errors(1), &
      errors(2), 1e3_real64 * t_points, 1e3_real64 * t_predict, active

    ! 5. VTK: the state at time t.
    if (vtk_every > 0) then
      if (mod(step, vtk_every) == 0) call write_vtk()
    end if

    call advance_particles()
  end do

  ! The last step's prediction, summed over the whole cloud (sum of squares per channel): the same for any
  ! number of ranks up to the library's cross-rank agreement (1e-6 relative per point) and the order of
  ! MPI_Allreduce's sums; ctest compares it between 1 and 3 ranks.
  digest = sum(predicted**2, dim=1)
  call MPI_Allreduce(MPI_IN_PLACE, digest, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)

  if (rank == 0) then
    write (*, '(a)') ''
    write (*, '(a, 3es24.16)') 'prediction digest (sum of squares of u, v, Cp at the last step):', digest
    write (*, '(a, i0, a, f8.5, a, f8.5, a, f8.5)') 'max relative L2 error over ', n_steps, ' steps: (u,v) ', &
      worst(1), '  Cp ', worst(2), '  velocity disturbance ', worst(3)
    write (*, '(a, f8.5, a, f8.5, a, f8.5)') 'mean relative L2 error:               (u,v) ', mean(1), '  Cp ', &
      mean(2), '  velocity disturbance ', mean(3)
    write (*, '(a, f9.3, a, f9.3, a)') 'mean time per step: set_points ', 1e3_real64 * elapsed(1), ' ms, predict ', &
      1e3_real64 * elapsed(2), ' ms (slowest rank)'
    if (vtk_every > 0) write (*, '(5a)') 'VTK series: ', trim(output_dir), '/cloud.pvd and ', trim(output_dir), &
      '/particles.pvd'
  end if

  if (vtk_every > 0) then
    call surrogate_vtk_close(cloud_vtk, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_close(cloud)')
    call surrogate_vtk_close(particle_vtk, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_close(particles)')
  end if
  call surrogate_close(s, ierr)
  call stop_on_error(ierr, 'surrogate_close')
  call MPI_Finalize()

contains

  ! --------------------------------------------------------------------------------------------------
  ! The problem
  ! --------------------------------------------------------------------------------------------------

  !> Closed-form potential flow past the cylinder centred at (centre_x, cy): (u, v, Cp) at p.
  function potential_flow(p, cy) result(f)
    real(real64), intent(in) :: p(2), cy
    real(real64) :: f(3)
    real(real64) :: dx, dy, r2, r4
    dx = p(1) - centre_x
    dy = p(2) - cy
    r2 = dx * dx + dy * dy
    r4 = r2 * r2
    f(1) = u_inf * (1 - radius**2 * (dx * dx - dy * dy) / r4)
    f(2) = -2 * u_inf * radius**2 * dx * dy / r4
    f(3) = 1 - (f(1)**2 + f(2)**2) / u_inf**2
  end function potential_flow

  !> Point `index` (0-based, global) of the cloud at `step`: every third point in the band
  !> R <= r <= 1.4 R (uniform in angle and radius), the others uniform over the fluid part of the
  !> window (rejection sampling), as share/training/potential_flow.py samples its clouds.
  function cloud_point(index, step, cy) result(p)
    integer, intent(in) :: index, step
    real(real64), intent(in) :: cy
    real(real64) :: p(2), theta, r
    integer :: draw
    if (mod(index, 3) == 0) then
      theta = 2 * pi * uniform(step, index, 0)
      r = radius * (1 + band_width * uniform(step, index, 1))
      p = [centre_x + r * cos(theta), cy + r * sin(theta)]
    else
      draw = 0
      do
        p = [x_min + (x_max - x_min) * uniform(step, index, draw), y_min + (y_max - y_min) * uniform(step, index, draw + 1)]
        if ((p(1) - centre_x)**2 + (p(2) - cy)**2 > radius**2) exit
        draw = draw + 2
      end do
    end if
  end function cloud_point

  !> A uniform number in (0, 1) from (seed, step, index, draw): the same on every rank.
  real(real64) function uniform(step, index, draw)
    integer, intent(in) :: step, index, draw
    integer(int64) :: h
    h = pcg_hash(int(draw, int64))
    h = pcg_hash(iand(h + index, mask32))
    h = pcg_hash(iand(h + step, mask32))
    h = pcg_hash(iand(h + seed, mask32))
    uniform = (real(h, real64) + 0.5_real64) / 4294967296.0_real64
  end function uniform

  !> PCG hash of a 32-bit value (Jarzynski & Olano 2020), in int64 arithmetic without overflow.
  integer(int64) function pcg_hash(x)
    integer(int64), intent(in) :: x
    integer(int64) :: state, word
    state = iand(x * 747796405_int64 + 2891336453_int64, mask32)
    word = iand(ieor(shiftr(state, int(shiftr(state, 28)) + 4), state) * 277803737_int64, mask32)
    pcg_hash = ieor(shiftr(word, 22), word)
  end function pcg_hash

  ! --------------------------------------------------------------------------------------------------
  ! Particles
  ! --------------------------------------------------------------------------------------------------

  !> A disc of particles upstream (a sunflower pattern: deterministic, evenly spread).
  subroutine release_particles()
    integer :: j, g
    real(real64) :: r, angle
    do j = 1, n_particles_local
      g = first_particle + j - 1
      r = blob_radius * sqrt((g + 0.5_real64) / n_particles)
      angle = g * pi * (3 - sqrt(5.0_real64))
      particles(j, :) = [blob_x + r * cos(angle), blob_y + r * sin(angle)]
    end do
    particle_active = 1
  end subroutine release_particles

  !> Inverse-distance weighting among the `neighbours` nearest cloud points.
  function interpolate(p) result(velocity)
    real(real64), intent(in) :: p(2)
    real(real64) :: velocity(2), best(neighbours), d, w
    integer :: which(neighbours), j, m
    best = huge(1.0_real64)
    which = 1
    do j = 1, size(field, 2)
      d = (field(1, j) - p(1))**2 + (field(2, j) - p(2))**2
      if (d >= best(neighbours)) cycle
      m = neighbours
      do while (m > 1)
        if (best(m - 1) <= d) exit
        best(m) = best(m - 1)
        which(m) = which(m - 1)
        m = m - 1
      end do
      best(m) = d
      which(m) = j
    end do
    if (best(1) < 1e-24_real64) then
      velocity = field(3:4, which(1))
      return
    end if
    velocity = 0
    w = 0
    do m = 1, min(neighbours, size(field, 2))
      velocity = velocity + field(3:4, which(m)) / best(m)
      w = w + 1 / best(m)
    end do
    velocity = velocity / w
  end function interpolate

  !> Heun's method in this step's (frozen) field; particles leaving the window stop, particles the
  !> moving cylinder has swept over are put back on its surface.
  subroutine advance_particles()
    integer :: j
    real(real64) :: k1(2), k2(2), p(2), d(2), r
    do j = 1, n_particles_local
      if (particle_active(j) == 0) cycle
      k1 = particle_velocity(j, 1:2)
      k2 = interpolate(particles(j, :) + dt * k1)
      p = particles(j, :) + 0.5_real64 * dt * (k1 + k2)
      d = p - [centre_x, cy]
      r = norm2(d)
      if (r < radius) p = [centre_x, cy] + d * (1.001_real64 * radius / max(r, 1e-12_real64))
      particles(j, :) = p
      if (p(1) < x_min .or. p(1) > x_max .or. p(2) < y_min .or. p(2) > y_max) particle_active(j) = 0
    end do
  end subroutine advance_particles

  ! --------------------------------------------------------------------------------------------------
  ! Output
  ! --------------------------------------------------------------------------------------------------

  !> The cloud with the solver's field, the surrogate's and their difference; then the particles.
  !> Staging calls (add_array, add_prediction) are local: an error there also makes the next write
  !> fail on every rank, which is where this program checks.
  subroutine write_vtk()
    velocity_solver(:, 1:2) = exact(:, 1:2)
    velocity_solver(:, 3) = 0
    velocity_surrogate(:, 1:2) = predicted(:, 1:2)
    velocity_surrogate(:, 3) = 0
    velocity_difference = velocity_surrogate - velocity_solver
    cp_solver = exact(:, 3)
    cp_difference = predicted(:, 3) - exact(:, 3)
    call surrogate_vtk_add_array(cloud_vtk, 'velocity_solver', velocity_solver, ierr, unit='m/s')
    call surrogate_vtk_add_array(cloud_vtk, 'Cp_solver', cp_solver, ierr, unit='1')
    call surrogate_vtk_add_prediction(cloud_vtk, s, predicted, ierr, prefix='surrogate_') ! surrogate_u, _v, _Cp
    call surrogate_vtk_add_array(cloud_vtk, 'velocity_surrogate', velocity_surrogate, ierr, unit='m/s')
    call surrogate_vtk_add_array(cloud_vtk, 'velocity_difference', velocity_difference, ierr, unit='m/s')
    call surrogate_vtk_add_array(cloud_vtk, 'Cp_difference', cp_difference, ierr, unit='1')
    call surrogate_vtk_add_array(cloud_vtk, 'rank', owner, ierr)
    call surrogate_vtk_write(cloud_vtk, t, xy, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_write(cloud)')

    call surrogate_vtk_add_array(particle_vtk, 'velocity', particle_velocity, ierr, unit='m/s')
    call surrogate_vtk_add_array(particle_vtk, 'active', particle_active, ierr)
    call surrogate_vtk_write(particle_vtk, t, particles, ierr)
    call stop_on_error(ierr, 'surrogate_vtk_write(particles)')
  end subroutine write_vtk

  subroutine print_header()
    integer :: c, channels
    write (*, '(a)') 'fortran_loop: potential flow past an oscillating cylinder, particles advected by a surrogate'
    write (*, '(4a)') '  model       ', trim(model_path), ', architecture ', surrogate_architecture(s, ierr)
    text = '  inputs     '
    channels = surrogate_in_channels(s, ierr)
    do c = 1, channels
      text = text//' '//surrogate_channel_name(s, SURROGATE_INPUT, c, ierr)//' ['// &
             surrogate_channel_unit(s, SURROGATE_INPUT, c, ierr)//']'
    end do
    text = text//'; outputs'
    channels = surrogate_out_channels(s, ierr)
    do c = 1, channels
      text = text//' '//surrogate_channel_name(s, SURROGATE_OUTPUT, c, ierr)//' ['// &
             surrogate_channel_unit(s, SURROGATE_OUTPUT, c, ierr)//']'
    end do
    write (*, '(a)') text
    write (*, '(a, i0, a, i0, a, i0, a, i0, a)') '  cloud       ', n_total, ' points per step on ', nranks, &
      ' MPI rank(s) (', n_total / nranks, ' to ', (n_total + nranks - 1) / nranks, ' per rank)'
    write (*, '(a, f5.2, a, f5.2, a, f4.2, a, f4.1, a)') '  cylinder    R = ', radius, ' m, centre (', centre_x, &
      ', ', amplitude, ' sin(2 pi t / ', period, ' s)) m'
    write (*, '(a, i0, a, f6.3, a, i0, a)') '  particles   ', n_particles, ', dt = ', dt, ' s, ', n_steps, ' steps'
    write (*, '(a)') ''
  end subroutine print_header

  !> Collective calls return the same ierr on every rank, so every rank stops here together.
  subroutine stop_on_error(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    if (status == SURROGATE_OK) return
    if (rank == 0) write (error_unit, '(4a)') 'fortran_loop: ', what, ' failed: ', surrogate_last_error()
    call MPI_Finalize()
    stop 1
  end subroutine stop_on_error

  ! --------------------------------------------------------------------------------------------------
  ! Command line
  ! --------------------------------------------------------------------------------------------------

  subroutine parse_arguments()
    character(len=1024) :: arg, value
    integer :: k, ios
    model_path = 'potential_flow.h5'
    output_dir = 'fortran_loop_output'
    n_steps = 100
    n_total = 2000
    n_per_rank = 0
    n_particles = 600
    dt = 0.05_real64
    vtk_every = 1
    seed = 2024
    threads = 0
    k = 1
    do while (k <= command_argument_count())
      call get_command_argument(k, arg)
      if (trim(arg) == '--help' .or. trim(arg) == '-h') then
        if (rank == 0) call usage()
        call MPI_Finalize()
        stop
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
      case ('--points')
        read (value, *, iostat=ios) n_total
        if (ios == 0 .and. n_total < 1) ios = 1
      case ('--points-per-rank')
        read (value, *, iostat=ios) n_per_rank
        if (ios == 0 .and. n_per_rank < 1) ios = 1
      case ('--particles')
        read (value, *, iostat=ios) n_particles
        if (ios == 0 .and. n_particles < 0) ios = 1
      case ('--dt')
        read (value, *, iostat=ios) dt
        if (ios == 0 .and. .not. (dt > 0)) ios = 1
      case ('--vtk-every')
        read (value, *, iostat=ios) vtk_every
        if (ios == 0 .and. vtk_every < 0) ios = 1
      case ('--seed')
        read (value, *, iostat=ios) seed
        if (ios == 0 .and. seed < 0) ios = 1
      case ('--threads')
        read (value, *, iostat=ios) threads
        if (ios == 0 .and. threads < 0) ios = 1
      case default
        call bad_argument('unknown option '//trim(arg))
      end select
      if (ios /= 0) call bad_argument('bad value '''//trim(value)//''' for '//trim(arg))
      k = k + 2
    end do
    if (n_per_rank > 0) n_total = n_per_rank * nranks
  end subroutine parse_arguments

  subroutine bad_argument(message)
    character(len=*), intent(in) :: message
    if (rank == 0) then
      write (error_unit, '(2a)') 'fortran_loop: ', message
      call usage()
    end if
    call MPI_Finalize()
    stop 2
  end subroutine bad_argument

  subroutine usage()
    write (*, '(a)') 'usage: mpirun -n P surrogate_fortran_loop [options]'
    write (*, '(a)') '  --model FILE           the potential-flow model file (default potential_flow.h5)'
    write (*, '(a)') '  --steps N              time steps (default 100)'
    write (*, '(a)') '  --dt SECONDS           time step (default 0.05)'
    write (*, '(a)') '  --points N             cloud points per step, in total (default 2000)'
    write (*, '(a)') '  --points-per-rank N    ... or per rank (N times the number of ranks in total)'
    write (*, '(a)') '  --particles N          particles released upstream (default 600)'
    write (*, '(a)') '  --output DIR           VTK output directory (default fortran_loop_output)'
    write (*, '(a)') '  --vtk-every K          write VTK every K steps, 0 = never (default 1)'
    write (*, '(a)') '  --seed N               seed of the point clouds (default 2024)'
    write (*, '(a)') '  --threads N            OpenMP threads per rank, 0 = OMP_NUM_THREADS (default 0)'
  end subroutine usage

end program fortran_loop
