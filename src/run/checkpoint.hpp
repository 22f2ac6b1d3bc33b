// The checkpoint of --checkpoint / --resume: everything a stopped run needs
// to go on as if it had never stopped. A text header, the flat parameter
// buffer, and a CRC-32 of all that precedes it:
//
//   dptrain-checkpoint 6
//   conv1.weight 20 1 3 3          the model's tensors, as in the params file
//   ...
//   devices cpu 2                  the run's settings, one line per row of run_settings()
//                                  (settings.cpp), in its order (the devices of each process)
//   processes 1                    (version 5 on; how many under mpirun; earlier files read as 1)
//   allreduce naive                (version 2 on; a version 1 file reads as naive)
//   split auto 192 64              (version 3 on; even, weights or auto, and the parts
//                                  of a full batch once known; earlier files read as even)
//   model lenet                    (version 4 on; lenet or resnet18, the model its tensors
//   bn local                       are; --bn; earlier files read as lenet, local)
//   math fp32                      (version 6 on; tf32 with --tf32; earlier files read as fp32)
//   batch 256
//   lr 0.3
//   warmup 0                       (version 2 on, as the allreduce line)
//   seed 0                         the seed of every random draw (see below)
//   pool avg
//   init xavier
//   limit-train 0
//   limit-test 0
//   epochs 5
//   checkpoint-every 1
//   next-epoch 3                   where the run stands
//   next-step 0
//   loss-sum 0
//   data float32-le 129068
//   <129068 * 4 bytes>
//   crc32 89abcdef
//
// The RNG state: after the initial weights, dptrain's only random draws are
// each epoch's shuffle, a function of (seed, epoch) alone (trainer.hpp). So
// the seed, next-epoch and next-step are the whole state; no generator
// words need storing. Numbers are written in their shortest exact form, so
// lr and loss-sum read back bit for bit. There is no time or path inside:
// the same run gives the same bytes. Version 1 files (before --allreduce),
// 2 (before --split), 3 (before --model), 4 (before mpirun) and 5 (before
// --tf32) still read.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "run/settings.hpp"

namespace dpt {

struct Checkpoint {
    TrainConfig settings;  // devices, batch, lr, seed, pool, init, limits, epochs, checkpoint-every
    Position position;
    std::vector<float> params;
};

// The file's bytes.
std::string encode_checkpoint(const Checkpoint& checkpoint);

// Checks and decodes a file's bytes. Throws InputError starting with `name`
// for anything but a whole checkpoint of this model in this format version:
// truncated, corrupted (checksum), another format version, another model, a
// parameters file given instead.
Checkpoint decode_checkpoint(std::span<const uint8_t> bytes, const std::string& name);

// Writes atomically (params_file.hpp): a crash mid-write leaves the previous
// checkpoint whole.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads and decodes `path`; messages start with "--resume PATH".
Checkpoint load_checkpoint(const std::string& path);

}  // namespace dpt
