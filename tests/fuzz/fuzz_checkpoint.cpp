// libFuzzer target: the checkpoint reader (decode_checkpoint) on any bytes.
// Every input must end in a checkpoint or an InputError. What it accepts
// must survive a round trip: encoding it and decoding again gives the same
// bytes a second time.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "run/checkpoint.hpp"
#include "base/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const dpt::Checkpoint k = dpt::decode_checkpoint(std::span<const uint8_t>(data, size), "input");
        const std::string once = dpt::encode_checkpoint(k);
        const std::string twice = dpt::encode_checkpoint(dpt::decode_checkpoint(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(once.data()), once.size()), "re-encoded"));
        if (once != twice) std::abort();
    } catch (const dpt::InputError&) {
    }
    return 0;
}
