// Writes one valid checkpoint (516 KB, too big to keep in git) for the
// checkpoint fuzzer's seed corpus: scripts/fuzz.sh runs it before fuzzing.
#include <cstdio>
#include <fstream>

#include "run/checkpoint.hpp"
#include "model/lenet.hpp"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_checkpoint_seed FILE\n");
        return 2;
    }
    dpt::Checkpoint k;
    k.settings.devices = dpt::DeviceChoice::of(dpt::DeviceKind::gpu, 1).then(dpt::DeviceKind::cpu, 2);  // a mixed run, with auto's measured parts
    k.settings.split = {dpt::SplitMode::automatic, {200, 28, 28}};
    k.settings.limit_train = 1000;
    k.position = {2, 3, 123.25};
    // Parameters of LeNet's count, spread over [-1, 1] (their values do not
    // matter to the reader, only that they are floats of the right count).
    k.params.resize(dpt::lenet::model().param_count());
    for (size_t i = 0; i < k.params.size(); ++i) k.params[i] = float(int(i % 201) - 100) / 100.0f;
    const std::string bytes = dpt::encode_checkpoint(k);
    std::ofstream(argv[1], std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return 0;
}
