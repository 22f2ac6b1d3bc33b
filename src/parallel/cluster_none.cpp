// A build without MPI (meson setup found no MPI library, or -Dmpi=disabled):
// every run is one process. Started by mpirun as several, each process would
// train the whole model alone, so it refuses and says how to get MPI.
#include "parallel/cluster.hpp"
#include "base/errors.hpp"

namespace dpt {

std::unique_ptr<Cluster> join_cluster() {
    const LaunchedAs launch = launched_as();
    if (launch.size > 1)
        throw InputError("started as rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.size) +
                         " processes (mpirun or srun), but this dptrain was built without MPI, so each would train "
                         "alone. Install Open MPI (scripts/deps.sh does; Debian: openmpi-bin libopenmpi-dev) and "
                         "build again (scripts/build.sh; -Dmpi=enabled insists on it), or run one process: "
                         "dptrain --cpus N or --gpus N");
    return single_process();
}

}  // namespace dpt
