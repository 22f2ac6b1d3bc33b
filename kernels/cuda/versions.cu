// The versions of each launcher (versions.hpp), newest last.
#include "versions.hpp"

#include <iterator>

namespace dpt::cuda {
namespace {

// The GEMM core (tiles.cuh) that every convolution and dense layer runs on.
const char* const gemm_versions[] = {
    "64x64 tiles, 4x4 results a thread from scalar shared-memory reads, one shared buffer",
    "tiles by m (32, 64 or 128 rows x 128 columns), 8x8 (4x8) results a thread from 4-float shared-memory "
    "reads, double-buffered",
    "version 2 with its shared-memory rows padded by 4 floats (FP32): a warp's stores of an operand read along k "
    "(weights, dy, a weight gradient's unfolded input) fall in 32 banks, not 4, one pass each instead of 8; the "
    "same elements, the same sums, bit for bit",
};
// A product split along k through scratch (tiles.cuh: gemm_split), which
// the dense layers and the larger convolutions' weight gradients run.
const char* const gemm_split_versions[] = {
    "the splits' partial sums into scratch, then a kernel of its own (finish_splits) adds them in split order",
    "the same sums in the same order, added in the product's kernel by the last block of each tile to store its "
    "partial sums (an integer ticket a tile): no second kernel",
};
const char* const conv2d_forward_versions[] = {
    "implicit GEMM: the unfolded input computed as tiles load; bias and ReLU in the epilogue",
    "version 1, but a filter bank of at most 64 channels and 64 taps on an image of at most 4,096 values summed "
    "directly (FP32): a block a sample and 4 channels, the image staged in shared memory; a pooling layer after it "
    "done by the same kernel (conv2d_forward_relu_pool)",
    "version 2, the product split along k (splits of at least 128, at most 8) where its tiles would leave a "
    "multiprocessor fewer than 4 blocks, the splits' partial sums added in order by a kernel of their own",
    "version 3; where a pooling whose windows do not overlap follows the ReLU (conv2d_forward_relu_pool), the "
    "kernel that adds the splits pools too (finish_splits_pool): no pooling kernel, the same bits",
    "version 4; a first layer that the direct kernel runs gathers the batch's images from the dataset as it stages "
    "them (conv2d_forward_relu_pool_gathered), and stores them and the labels for the backward: no gather kernel",
    "version 5; LeNet's conv2 (a stride-1 convolution of 5x5 filters on 9-wide outputs) summed directly: a "
    "block a sample, a chunk of input channels and their filters staged in shared memory, a thread a row of one "
    "output channel in registers; bias, ReLU and a pooling after it in the same kernel: no split, no finishing or "
    "pooling kernel",
    "version 6, each sample's output channels split between two blocks (twice the blocks: LeNet's 256 samples "
    "filled 0.65 of a wave), the same sums in the same order",
    "version 7; the implicit GEMM (ResNet-18's convolutions, and --tf32's) reads where each filter tap of its "
    "unfolded input lies, and whether it falls inside the image, from a table in shared memory (filters of at most "
    "32 taps): a load is a table read, a bit test and an add, instead of stepping through the filter's rows and "
    "columns; the same elements, the same sums",
    "version 8; the rows kernel (LeNet's conv2) stages each chunk in batches: a thread issues up to 12 loads before "
    "it stores any, where each store had waited on its own load (a memory latency an element); the same values in "
    "the same places, the same sums, bit for bit",
    "version 9; LeNet's conv2 (5x5 filters on 13x13 inputs, input channels a multiple of 4, at most 50 output "
    "channels) by a block a sample of 256 threads, each summing 2 output channels of one row (90 FFMA for 9 "
    "shared-memory loads, against version 8's 45 for 6), the filters staged transposed so that 2 channels' tap is "
    "one load, and each chunk's loads issued into registers before the chunk before it is summed "
    "(rows_forward_tiled); version 8's sums in its order, bit for bit",
    "version 10; LeNet's conv1 with its pooling (20 filters of 3x3 on one channel, 2x2 windows that tile the "
    "output) by a block a sample of 192 threads, each summing one pooling window's 4 outputs for all 20 channels "
    "from a 4x4 patch of the image in registers and pooling them itself (window_forward): the image staged once a "
    "sample instead of 5 times, 256 blocks instead of 1,280; version 2's sums in its order, bit for bit",
    "version 11; LeNet's conv2 by version 10's kernel with one output channel a thread, not two "
    "(rows_forward_tiled_single): 450 threads a sample in 15 warps, where version 10's 225 took 8 (its last warp "
    "one thread), for twice the warps to issue from; version 8's sums in its order, bit for bit",
};
const char* const conv2d_backward_data_versions[] = {
    "implicit GEMM over the spread output gradient (zero taps included)",
    "no zero taps: the unfolded gradient w^T . dy into scratch, then each input pixel gathers its taps (col2im)",
    "version 2; where the input is a pooling whose convolution before has a small filter bank "
    "(conv2d_backward_data_weight_pool), that convolution's weight-gradient kernel gathers the taps as it reads "
    "the pooling's gradient: no gather kernel",
    "version 2, but a stride-1 convolution of small planes (LeNet's conv2, ResNet-18's 3x3 of stride 1 on 12x12 "
    "and 6x6) summed directly: a block a sample, its dy staged in shared memory, a thread a row of the input "
    "gradient of 2 channels in registers; no columns in memory, no gather (version 3's gather into the weight "
    "gradient is not part of it)",
    "version 4's sums in its order, bit for bit, with the filters staged in shared memory beside dy, rows padded "
    "for 16-byte reads, and a thread a row of one channel, the threads of an input row side by side (a warp's "
    "rows skip nearly the same filter rows); LeNet's conv2 (5x5 filters on 9-wide outputs) alone, ResNet-18's "
    "3x3 convolutions stay on version 4",
    "version 5, each sample's input channels split between two blocks (twice the blocks: LeNet's 256 samples "
    "filled 0.48 of a wave), the same sums in the same order",
    "version 5's kernel, a block a sample, with its chunks of dy and filters staged in batches: a thread issues up "
    "to 12 loads before it stores any, where each store had waited on its own load; the same sums, bit for bit",
    "version 7; LeNet's conv2 (5x5 filters on 13x13 inputs, at most 20 input channels and a multiple of 4) by a "
    "block a sample of 160 threads, each summing 2 input channels of one row (90 FFMA for 8 shared-memory loads, "
    "against version 5's 45 for 5), the filters staged transposed so that 2 channels' tap is one load, and each "
    "chunk's loads issued into registers before the chunk before it is summed (input_grad_rows_tiled); version "
    "4's sums in its order, bit for bit",
    "version 8 with chunks of 10 output channels instead of 5 (input_grad_rows_tiled_wide): half the chunks, so "
    "half the barriers at which a block's warps wait together; the same sums, bit for bit",
    "version 9; where another layer reads the input too (ResNet-18's block inputs, read by a block's first "
    "convolution and its shortcut) and the gradient ends in input_grad_rows or gather_input_grad, that kernel adds "
    "it to the gradient there (dx += its sum, in the same rounding as sum_parts): no staged copy, no sum_parts "
    "kernel, the same bits",
    "version 10; the unfolded gradient's product (w^T . dy, version 2's first pass) reads each thread's row of w^T as "
    "a run down w's column (a filter tap's weights, one an output channel), an add and a load, where version 10 "
    "worked out each element's address from its tap and channel; the same elements, the same sums, bit for bit",
    "version 11; LeNet's conv2 by version 9's kernel with one input channel a thread, not two "
    "(input_grad_rows_tiled_single, _single_finishing): 260 threads a sample in 9 warps, where version 9's 130 "
    "took 5 (its last warp two threads), for twice the warps to issue from; version 4's sums in its order, bit for bit",
};
const char* const conv2d_backward_weight_versions[] = {
    "implicit GEMM split along the batch; the bias gradient one block a channel, looping over samples",
    "the bias gradient split along the batch too (at least 4,096 values a block, summed in a fixed order), "
    "its partial sums added by the same kernel as the weight gradient's",
    "version 2 with twice the splits along the batch (about 4 blocks a multiprocessor); a filter bank of at most "
    "1,024 weights and biases (64 channels, 64 taps) summed directly: a block a sample, 64 pixels at a time staged "
    "in shared memory, the blocks' sums added in a fixed order",
    "version 3, the bias gradient as one more column of the product (dy . [unfold(x)^T | 1]) where it fits the last "
    "tile (taps not a multiple of 128; FP32): no bias kernel of its own",
    "version 4, the small filter bank's blocks' sums added by the last of them to store its own (an integer ticket; "
    "each sum in block order) instead of by a kernel of their own",
    "version 5, the small filter bank's loads of a chunk of pixels all in flight at once, and the next chunk's "
    "while this one is summed (dy read directly, or through an average pooling whose windows do not overlap; "
    "the same sums, bit for bit)",
    "version 6; for a bank of 3x3 filters over one input channel, a block 4 channels and a slice of the batch's "
    "pixels, each thread all 40 of their sums in registers (no shared memory or barrier a pixel), the threads' "
    "sums added by a fixed tree and the slices' by the last block",
    "version 7; LeNet's conv2 (a stride-1 convolution of 5x5 filters on 9-wide outputs, no padding) summed "
    "directly: a block a slice of the batch and half the output channels, x and dy of a sample at a time staged in "
    "shared memory, a thread an (output, input) channel pair's 25 taps and its output channel's bias in registers; "
    "the slices' sums added in order by finish_splits (FP32)",
    "version 8; where its rows kernel runs on an output 9 rows high (LeNet's conv2), its sums, bit for bit, with "
    "each input row read once a sample: the loop runs over x's rows, and the last 5 dy rows, those that meet the "
    "current x row, stay in registers",
    "version 9; each sample's x and dy staged in batches: a thread issues up to 12 loads before it stores any, where "
    "each store had waited on its own load; the same sums, bit for bit",
    "version 9's sums in its order, bit for bit, with the next sample's x and dy loaded into registers (x 16 "
    "bytes a load) before the current one is summed, and stored into shared memory after "
    "(weight_grad_rows_prefetched): the copy's latency behind the sums",
    "version 11; LeNet's conv1 through its average pooling (3x3 filters on one channel, 2x2 windows that tile the "
    "output) a pooling window at a time (bank_weight_grad_windows): its 4 pixels share a 4x4 patch of the input "
    "and a channel's pooled gradient, 36 loads for 144 multiply-adds where version 7 took 17 for 36; the same blocks, "
    "tree and last block, each thread's pixels added in another order",
    "version 12; where the layer's input gradient runs on the tiled rows kernel (LeNet's conv2, conv2d_backward_data "
    "9), that kernel's blocks add the weight gradient's slices, as finish_splits does, before their own sums "
    "(conv2d_backward, input_grad_rows_tiled_finishing): no finish_splits kernel, the same bits",
    "version 13; the implicit GEMM (ResNet-18's weight gradients, and --tf32's) loads each element of the "
    "unfolded input on one predicate (the k-step's edge and the window's rows and columns; for a 1x1 convolution "
    "without padding, whose taps all fall inside the image, the edge alone) from a pointer to the window's corner "
    "held in registers, where version 13 branched twice around each load and rebuilt its address from an element "
    "index; the same elements, the same sums, bit for bit",
};

const char* const dense_versions[] = {
    "three products on the GEMM core, unsplit",
    "each product split along k through scratch where its tiles would leave the GPU idle, the splits added in order",
    "version 2, the bias gradient as one more column of the weight gradient's product (dy^T . [x | 1]) instead of a "
    "kernel of its own (FP32; with --tf32 the bias keeps its own kernel, to sum the unrounded dy)",
    "version 3, the weight and data gradients' products in one launch (tiles.cuh: gemm_pair), each split as before",
    "version 4; after a pooling whose windows do not overlap (dense_backward_pool), the data gradient's epilogue "
    "writes the gradient of the pooling's input, through the pooling and the ReLU before it, in the launch of both "
    "products: no pooling kernel",
    "version 5; a classifier's last layer (at most 1,024 inputs and 32 classes), the softmax cross-entropy loss and "
    "the layer's backward in one launch (dense_softmax_cross_entropy, FP32): a block a sample, the weight and bias "
    "gradients summed by groups of 16 samples and then the groups, each by the last block to finish (tickets)",
    "version 6; after a pooling whose windows do not overlap, where the two gradients' products run apart "
    "(gemm_split 1), the kernel that adds the data gradient's splits (finish_splits) stores it through the "
    "pooling and the ReLU before it, as version 5's epilogue does: no pooling kernel, the same bits",
    "version 7; the last layer's kernel (dense_loss_wide) issues all the loads of each of its last blocks' sums "
    "before the sum: the group's dlogits staged in shared memory and a column of its inputs loaded at once, "
    "groups of 32 samples, and the groups' sums 8 at a time; the same logits, loss and dx, bit for bit",
    "version 8; with gemm_split 1 too, the weight and data gradients' products in one launch (gemm_pair), their "
    "splits added by one kernel after it (finish_pair_splits): 2 kernels where version 8 launched 4, the same bits",
    "version 9; where the layer before the last is a dense one with its ReLU whose product is split (gemm_split 1), "
    "its splits' partial sums are added, with its bias and ReLU, by the last layer's kernel as each block loads its "
    "sample (dense_loss_wide), which stores them on the way: no finish_splits kernel, the same bits",
    "version 10; in the launch of a layer's two gradients (FP32), each thread reads its row of dy^T as a run down "
    "dy's column, a pointer's add a load, where version 10 worked out each element's address from its row and "
    "sample; the same elements, the same sums, bit for bit",
};
// How --tf32 (Math::tf32) runs the convolutions: which kernels take TF32
// operands.
const char* const tf32_versions[] = {
    "every convolution and dense product on the tensor cores (the GEMM core's TF32 tiles); the kernels that sum a "
    "convolution directly take FP32 alone, so with --tf32 LeNet's conv1 runs as products, with gather, pooling and "
    "finishing kernels of their own",
    "version 1, but the direct kernels that FP32 runs where they fit take --tf32 too (conv1's forward and weight "
    "gradient, LeNet's conv2 input gradient: direct_forward, bank_weight_grad_sums, input_grad_rows_staged), each "
    "operand rounded to TF32 as it is staged and the sums on the FP32 units (a product of two TF32 numbers is "
    "exact in FP32): the same arithmetic, and no gather, pooling or finishing kernel for conv1",
    "version 2, and LeNet's conv2 forward (conv2d_forward 10, rows_forward_tiled) takes --tf32 too, its operands "
    "rounded to TF32 as it stages them: with --tf32 that product runs on the FP32 units, as FP32 does, instead of "
    "on the tensor cores' tiles",
    "version 3, but LeNet's conv2 forward (5x5 filters on 13x13 inputs, at most 20 input and 64 output channels) on "
    "the tensor cores by a kernel of its own (rows_forward_mma): a block a sample, its image staged once, the "
    "unfolded input built in shared memory 32 rows of k at a time from it, each of 6 warps 2 x 2 fragments of the "
    "64 x 96 product; bias, ReLU and the pooling after it in the same kernel. The tensor cores' sums, not version "
    "3's bits",
    "version 4, and the kernel of a classifier's last layer with the loss (dense_softmax_cross_entropy, dense 6 on; "
    "dense 10's unfinished layer before it) takes --tf32 too, rounding each product's operands as it reads them "
    "(the bias's gradient from dlogits as they are), on the FP32 units: with --tf32 LeNet's dense head runs as "
    "FP32's does",
    "version 5, and conv2's weight gradient on conv2d_backward_weight 11's rows kernel (weight_grad_rows_prefetched; "
    "with version 13 its slices added by the input gradient's kernel) takes --tf32 too, x and dy rounded as they are "
    "staged, and dy staged as it is too, for the bias: no product, bias or finishing kernels of its own",
    "version 6, and LeNet's conv2 input gradient (5x5 filters on 13x13 inputs, at most 20 input and 56 output "
    "channels) on the tensor cores by a kernel of its own (input_grad_mma): a block a sample, dy staged once; for "
    "each input channel the product of its filters' taps and dy (25 x oc by oc x 81), then each input pixel the sum "
    "of its taps' products (the CPU twin's order of work); with conv2d_backward_weight 13 its blocks add the weight "
    "gradient's slices first. The tensor cores' sums, not version 6's bits",
    "version 7 with 4 warps a block instead of 8, each 32 columns of the products instead of 16: every warp loads "
    "all of a channel's tap fragments, so a block loads half as many, and each thread twice the taps. The same "
    "sums as version 7, bit for bit",
    "version 8, and LeNet's conv2 weight gradient (5x5 filters on 13x13 inputs, at most 20 input and 56 output "
    "channels) on the tensor cores by a kernel of its own (weight_grad_mma): a block a slice of the batch and 64 of "
    "the unfolded input's columns; for each sample dy (oc x 81) times the unfolded input (81 x 64) that the block "
    "builds in shared memory, the results held in the warps' fragments across the slice; the bias summed from dy as "
    "it is. Into the rows kernels' slices, which the input gradient's kernel adds. The tensor cores' sums, not "
    "version 8's bits",
    "version 9, and the bias gradient of the dense layer before the loss (LeNet's dense1) summed by the loss's "
    "kernel (dense_loss_wide, dense 8 on) from the dx it writes, as it sums the last layer's [dw | db]: in groups "
    "of 32 samples, then the groups in order; that layer's backward launches no dense_bias_grad. The same sums in "
    "another order than version 9's",
};

// Batch normalisation's per-channel sums (the statistics and the backward's
// two), which ResNet-18 runs.
const char* const batch_norm_versions[] = {
    "a block a channel, its values summed in double in a fixed order (ResNet-18's first layer, one channel, on one "
    "block)",
    "each channel's values in slices, enough for about 256 blocks (at least 512 values a slice), each summed as "
    "version 1 sums a channel, and the slices' sums added in slice order by the last block of the channel to store "
    "its own (an integer ticket a channel)",
    "version 2, and the forward's normalisation works out the channels' means and 1/std from the sums itself, each "
    "block into shared memory (at most 1,024 channels; block 0 stores them for the backward): no kernel of their own "
    "(saved_kernel), the same bits",
    "version 3, and every layer's running statistics moved by one launch after the update (running_all_kernel, a "
    "block a layer) instead of a launch a layer: the same arithmetic, the same bits",
    "version 4, and a ReLU right after the layer applied by its normalising kernel (training's and evaluation's) "
    "instead of a kernel of its own: the same values, the same bits",
    "version 5, and that ReLU's backward done by the backward's sums kernel, which masks dy as it reads it and "
    "stores the masked values back for the data gradient's kernel (relu_bwd's values, in place): no kernel of "
    "its own, the same bits",
    "version 6, and the data gradient's kernel and evaluation's normalising kernel work out each channel's constants "
    "once a block, into shared memory (at most 512 channels), where each value worked them out (two double "
    "divisions of the sums by the count; a division by the square root of the running variance): the same "
    "expressions, the same bits",
    "version 7, and the statistics of a layer right after a convolution whose forward product is split along k "
    "(ResNet-18's 128- to 512-channel layers) summed by the kernel that adds the splits (finish_stats_kernel): a "
    "block a slice of a channel, each value its splits added in split order and the bias, stored in y and summed; "
    "no finish_splits, and y read once instead of twice. The same values in the same order, the same bits",
};
// A residual add and the ReLU after it (ResNet-18's blocks end so).
const char* const residual_versions[] = {
    "the add (sum_parts) and the ReLU (relu_fwd) each a kernel; backward, the ReLU's mask (relu_bwd), then the other "
    "input's gradient a copy of it (or sum_parts)",
    "one kernel forward (add_relu_kernel), one backward (add_relu_backward_kernel: the mask stored back and the "
    "other input's gradient from the same loads): the same values, the same bits",
};
// Pooling's backward (ResNet-18's max pooling after its first layer).
const char* const pool_versions[] = {
    "a thread an input pixel, which scans every window covering it for the tap that window credits",
    "max pooling: a thread a stride x stride tile of input pixels (stride at most 4), each window covering the "
    "tile scanned once and its credit given to the tile's pixel it points at, in the same order: the same bits",
};
// How many splits along k a convolution's split products take (its forward
// from conv2d_forward 3, its weight gradient's product).
const char* const waves_versions[] = {
    "from the shape alone: the weight gradient enough for about 512 blocks of 64 x 64 tiles (at least 128 of k a "
    "split), the forward for about 4 blocks of 64 x 128 a multiprocessor (at most 8 splits)",
    "version 1's, or fewer where that runs in fewer waves a split of k: s splits take about ceil(blocks / wave) waves "
    "of blocks k / s long, and s goes to the count, at most version 1's, with the least ceil(blocks / wave) / s, "
    "where that gains 5% or more (a wave: 132 multiprocessors times 1, 2 or 3 blocks of 128, 64 or 32 rows; "
    "tiles.cuh: fit_waves); longer splits, summed in another order",
};

// The defaults: the fastest whole epochs on a GPU, LeNet and ResNet-18,
// with each launcher set back a version at a time and then together
// (bench/kernel_versions.sh; the tables are in docs/performance.md). On an
// H200 a LeNet epoch in FP32 took 176 ms with every launcher at its latest
// and 95 ms with gemm_split 1, conv2d_backward_data 2 and
// conv2d_backward_weight 3. The later versions launch fewer kernels but ran
// slower there, and stay checked and timed beside the defaults:
// - gemm_split 2 (the last block of a tile adds its splits): LeNet's epoch
//   took 0.68x the time with version 1, ResNet-18's 0.91x;
// - conv2d_backward_data 3 (conv2's gather in conv1's weight-gradient
//   kernel, which became the step's longest): 0.86x with version 2.
// Then on an H100, against those defaults (97.2 ms a LeNet epoch, 1717 ms
// ResNet-18's): conv2d_forward 3 and conv2d_backward_weight 6 together
// took 0.89x and 0.92x (86.1 ms, 1579 ms); weight versions 4 and 5, which
// version 6 builds on, had been even with 3 there (1.00x, 1.01x). Then on
// an H200, conv2d_backward_weight 7 against 6: LeNet 0.91x (77.1 ms against
// 84.3), ResNet-18 even (1541.5 ms, 1545.6); then conv2d_backward_data 4
// against 2: LeNet even (77.5 ms, 77.1), ResNet-18 0.96x (1478.3 ms against
// 1540.9, with its 3x3 planes on version 4 too, which it now leaves to
// version 2: conv_backward_data.cu, input_grad_rows_kernel).
// Then on an H200, against those defaults (77.2 ms a LeNet epoch, 1448.6
// ms ResNet-18's; the median of 3 runs in turns, ResNet-18 of 2):
// - conv2d_forward 4 and 5 (fewer kernels, the same sums) took 1.01x and
//   1.00x, dense 6 1.02x, gemm_split 2 1.72x; every launcher at its latest
//   then (10 kernels a step) 1.70x. A step's kernels are not waiting on
//   launches in a graph; they are slow;
// - conv2d_backward_data 5 (conv2's input gradient, the step's longest
//   kernel, with its filters in shared memory) 0.925x (71.4 ms), and with
//   conv2d_forward 6 (conv2 summed directly, its pooling in the same kernel)
//   0.912x (70.4 ms); 2 replicas sharing the GPU 0.84x (77.9 ms against
//   92.4). Both stay off ResNet-18's shapes, where they ran slower
//   (conv_forward.cu, conv_backward_data.cu), so its epoch is unchanged.
// Then on an H200, against those defaults (70.7 ms a LeNet epoch, 88.4 ms
// with --tf32, 1432 ms ResNet-18's; two calls of bench/kernel_versions.sh,
// each the median of 2 or 3 runs in turns, ResNet-18 of 1 and 2):
// - tf32 2 (conv1 and conv2's input gradient summed directly with --tf32):
//   a --tf32 LeNet epoch 0.75x (66.0 and 66.1 ms);
// - conv2d_forward 8 (ResNet-18's products read the unfolded input through
//   a table of taps): ResNet-18 0.96x (1380.9 ms both times), LeNet even
//   (70.5 ms); version 7 alone, on which it builds, even too (70.5 ms);
// - conv2d_backward_weight 8 (conv2's weight gradient summed directly):
//   LeNet 0.99x (70.0 ms both times), with conv2d_forward 8 69.8 ms;
// - conv2d_backward_data 6 1.01x, dense 6 1.02x, gemm_split 2 1.79x, every
//   launcher at its latest 1.49x.
// A first version 3 of the GEMM core (its k loop two k-steps an iteration, the
// shared buffers' addresses as constants: 5% to 14% fewer instructions a
// k-step, the same bits) took LeNet 0.99x and ResNet-18 1.02x, and with
// conv2d_forward 8 ResNet-18 1403 ms against 1381 without it: it was taken
// out again, and with it half the GEMM kernels nvcc compiled. So were two
// threads a row in conv2's rows kernels (commit 0508ab1: twice the warps):
// the forward even (69.5 ms), backward-data 1.04x (72.2 ms).
// Then on an H200, against those defaults (69.8 ms a LeNet epoch, 1382 ms
// ResNet-18's; bench/kernel_versions.sh, the median of 3 and then 5 runs in
// turns, ResNet-18 of 1):
// - conv2d_backward_weight 9 (conv2's weight gradient, each input row read
//   once a sample): LeNet 0.97x (68.0 ms both times), 2 replicas 0.97x
//   (59.3 ms against 61.0), the same bits;
// - conv2d_forward 9 and conv2d_backward_data 7 (3 rows a thread) ran
//   slower: LeNet 1.08x and 1.17x, ResNet-18 1.11x and 1.12x (kernel_bench:
//   conv2's forward 0.0893 ms against 0.0673, its input gradient 0.1169
//   against 0.0669). They were taken out again.
// Then on an H200, against those defaults (67.5 ms a LeNet epoch), the
// versions that copy conv2's chunks in batches (conv2d_forward 9,
// conv2d_backward_data 7, conv2d_backward_weight 10): 1.00x, 1.01x and
// 1.00x, all three 1.01x. ncu: the forward's wait on its loads went (3.31
// to 0.50 stall cycles an instruction), but it executes 14% more
// instructions; they stay as the base for a cheaper copy.
// Then on an H200, against those defaults (67.5 ms a LeNet epoch, 67.3 ms
// with --tf32; the median of 3 runs in turns): conv2's tiled forward with 4
// channels a thread 0.93x (62.9 ms), conv2d_backward_data 8 0.95x (64.4 ms),
// both 0.89x (59.8 ms); with --tf32 backward-data 8 0.96x (64.3 ms).
// kernel_bench: conv2's forward 0.0452 ms against 0.0660, its input
// gradient 0.0539 against 0.0664. Then, against those two (60.1 ms): 2
// channels a thread in the forward (conv2d_forward 10 now; the 4-channel
// kernel was taken out) 0.99x (59.4 ms), conv2d_backward_weight 11 0.98x
// (59.0 ms), both 0.97x (58.3 ms); forward 8 and backward-data 5 again 1.13x
// (67.9 ms). kernel_bench: conv2's forward 0.0437 ms against 0.0464, its
// weight gradient 0.0544 against 0.0588. Then, against those (58.1 ms,
// 64.3 with --tf32): conv2d_backward_data 9 0.98x (57.2 ms; --tf32 0.99x,
// 63.4 ms; kernel_bench 0.0498 ms against 0.0539); the morning's defaults
// (forward 8, backward-data 5, weight 9) 1.16x (67.5 ms; --tf32 1.05x).
// Then on an H200, against those defaults (58.3 ms a LeNet epoch, 63.9 ms
// with --tf32, 1386.6 ms ResNet-18's; the median of 3 runs in turns,
// ResNet-18 of 2; the same figures again in a second call):
// - dense 10 (LeNet's head in 5 kernels) 0.95x (55.3 ms), with
//   conv2d_backward_weight 13 (conv2's weight-gradient slices added by its
//   input gradient's kernel) 0.93x (54.1 ms; --tf32 0.95x, 60.5 ms).
//   dense 7 took 1.03x, 8 0.97x, 9 0.96x; conv2d_backward_weight 12 and 13
//   alone 0.98x; conv2d_forward 11 (conv1 a pooling window a thread) 1.00x,
//   and 54.1 ms beside the other two as without it: it stays off;
// - ResNet-18: batch_norm 5 (the ReLU after a batch norm in its normalising
//   kernel) 0.97x (1341.0 ms), residual 2 0.99x (1378.3 ms), and with
//   batch_norm 7 1359.4 ms against 1367.9: each time 8 ms less with the
//   add's ReLU in its kernel. batch_norm 6 and 7 took 0.99x: their masked
//   sums, profiled, ran 7 times as long as the plain ones (a store held each
//   load back), since fixed but not yet timed. batch_norm 5 and residual 2,
//   which fuse different ReLUs, were not timed together.
constexpr int gemm_default = 2, gemm_split_default = 1, conv2d_forward_default = 10, conv2d_backward_data_default = 9,
              conv2d_backward_weight_default = 13, dense_default = 10, tf32_default = 2, batch_norm_default = 5,
              residual_default = 2, pool_default = 1, waves_default = 1;
static_assert(gemm_default <= int(std::size(gemm_versions)) && gemm_split_default <= int(std::size(gemm_split_versions)) &&
              conv2d_forward_default <= int(std::size(conv2d_forward_versions)) &&
              conv2d_backward_data_default <= int(std::size(conv2d_backward_data_versions)) &&
              conv2d_backward_weight_default <= int(std::size(conv2d_backward_weight_versions)) &&
              dense_default <= int(std::size(dense_versions)) && tf32_default <= int(std::size(tf32_versions)) &&
              batch_norm_default <= int(std::size(batch_norm_versions)) &&
              residual_default <= int(std::size(residual_versions)) && pool_default <= int(std::size(pool_versions)) &&
              waves_default <= int(std::size(waves_versions)));

}  // namespace

int gemm_version = gemm_default;
int gemm_split_version = gemm_split_default;
int conv2d_forward_version = conv2d_forward_default;
int conv2d_backward_data_version = conv2d_backward_data_default;
int conv2d_backward_weight_version = conv2d_backward_weight_default;
int dense_version = dense_default;
int tf32_version = tf32_default;
int batch_norm_version = batch_norm_default;
int residual_version = residual_default;
int pool_version = pool_default;
int waves_version = waves_default;

const std::vector<LauncherVersions>& launcher_versions() {
    static const std::vector<LauncherVersions> all = {
        {"gemm", {std::begin(gemm_versions), std::end(gemm_versions)}, gemm_default, &gemm_version},
        {"gemm_split", {std::begin(gemm_split_versions), std::end(gemm_split_versions)}, gemm_split_default,
         &gemm_split_version},
        {"conv2d_forward", {std::begin(conv2d_forward_versions), std::end(conv2d_forward_versions)},
         conv2d_forward_default, &conv2d_forward_version},
        {"conv2d_backward_data", {std::begin(conv2d_backward_data_versions), std::end(conv2d_backward_data_versions)},
         conv2d_backward_data_default, &conv2d_backward_data_version},
        {"conv2d_backward_weight",
         {std::begin(conv2d_backward_weight_versions), std::end(conv2d_backward_weight_versions)},
         conv2d_backward_weight_default, &conv2d_backward_weight_version},
        {"dense", {std::begin(dense_versions), std::end(dense_versions)}, dense_default, &dense_version},
        {"tf32", {std::begin(tf32_versions), std::end(tf32_versions)}, tf32_default, &tf32_version},
        {"batch_norm", {std::begin(batch_norm_versions), std::end(batch_norm_versions)}, batch_norm_default,
         &batch_norm_version},
        {"residual", {std::begin(residual_versions), std::end(residual_versions)}, residual_default,
         &residual_version},
        {"pool", {std::begin(pool_versions), std::end(pool_versions)}, pool_default, &pool_version},
        {"waves", {std::begin(waves_versions), std::end(waves_versions)}, waves_default, &waves_version},
    };
    return all;
}

bool select_version(std::string_view launcher, int version) {
    for (const LauncherVersions& l : launcher_versions())
        if (launcher == l.launcher) {
            if (version < 0 || version > int(l.versions.size())) return false;
            *l.selected = version == 0 ? l.trained : version;
            return true;
        }
    return false;
}

void select_default_versions() {
    for (const LauncherVersions& l : launcher_versions()) *l.selected = l.trained;
}

int version_count(std::string_view launcher) {
    for (const LauncherVersions& l : launcher_versions())
        if (launcher == l.launcher) return int(l.versions.size());
    return 0;
}

}  // namespace dpt::cuda
