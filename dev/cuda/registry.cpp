// The versions of dev/cuda/ in this build (dev.hpp: DEV_VERSION).
#include "dev.hpp"

namespace dpt::cuda::dev {

std::vector<Version>& versions() {
    static std::vector<Version> all;
    return all;
}

}  // namespace dpt::cuda::dev
