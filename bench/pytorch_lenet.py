#!/usr/bin/env python3
"""dptrain's PyTorch peer: the same LeNet or ResNet-18, data and SGD, timed the same way.

scripts/bench_cpu.sh and scripts/gpu.sh (stage bench) run this beside dptrain
in one call and report the ratio of epoch times. The peer gets every
advantage PyTorch offers a model this small:
  - the whole data set lives in the device's memory as float32 tensors, so
    a batch is one indexing operation (no DataLoader, no host copies);
  - --compile wraps the step in torch.compile(mode="reduce-overhead"), which
    replays each step as a CUDA graph on a GPU;
  - --graph captures the whole step (forward, loss, backward, SGD) in one
    torch.cuda.CUDAGraph with static input buffers, and each step copies its
    batch into them and replays it (a last, smaller batch runs eagerly): no
    host launches, so what the kernels themselves take. Its capture takes
    three warm-up steps on a side stream, after which the weights are put
    back as they were.
On a GPU the arithmetic is FP32 unless --tf32 is given: PyTorch lets cuDNN's
convolutions use TF32 tensor cores by default, which would compare dptrain's
FP32 with PyTorch's TF32. --tf32 turns TF32 on for convolutions and matrix
products alike, the peer of dptrain --tf32.

The model is dptrain's: LeNet (conv 20@3x3, ReLU, 2x2 pool, conv 50@5x5,
ReLU, 2x2 pool, dense 128, ReLU, dense 10) or, with --model resnet18, the
gluon tutorials' resnet18_28 (src/model/resnet.hpp: batch norm, conv 64@3x3, max
pool 3x3/2, six residual blocks, avg pool 3x3, dense 10; batch norm with
gluon's momentum 0.9, which PyTorch calls 0.1, and eps 1e-5); softmax
cross-entropy, weights drawn as --init says (xavier: uniform, normal: std
0.01) and zero biases; plain SGD with the mean loss (dptrain's lr * sum / B
is the same step).

Output, one line an epoch (the scripts read "time T s"):
  epoch 2 time 0.061 s  983,606 samples/s  test_acc 0.8123
Epoch time covers the training steps alone and ends after a device
synchronise (torch.cuda.synchronize), as dptrain's does.
"""
import argparse
import gzip
import os
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as missing:  # (the arguments are still checked: main)
    torch = None
    import_error = missing


def read_idx(directory, stem):
    """The IDX file `stem` in `directory`, gzipped or not, as a numpy array."""
    for name in (stem + "-ubyte.gz", stem + "-ubyte", stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                raw = f.read()
            dims = raw[3]
            shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    sys.exit(f"pytorch_lenet.py: no {stem} IDX file in {directory}")


def find_data(given):
    for d in ([given] if given else ["data/fashion-mnist", "/usr/share/datasets/fashion-mnist"]):
        if d and os.path.isdir(d):
            return d
    sys.exit("pytorch_lenet.py: no Fashion-MNIST directory (give --data DIR)")


def lenet(pool, init):
    pool_layer = nn.AvgPool2d(2) if pool == "avg" else nn.MaxPool2d(2)
    model = nn.Sequential(
        nn.Conv2d(1, 20, 3), nn.ReLU(), pool_layer,
        nn.Conv2d(20, 50, 5), nn.ReLU(), pool_layer,
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))
    return initialised(model, init)


def initialised(model, init):
    """Conv and dense weights drawn as --init says, their biases zero."""
    for layer in model.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            if init == "xavier":
                nn.init.xavier_uniform_(layer.weight)
            else:
                nn.init.normal_(layer.weight, std=0.01)
            nn.init.zeros_(layer.bias)
    return model


class Residual(nn.Module if torch is not None else object):
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), as dptrain's."""

    def __init__(self, inputs, channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, channels, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)
        self.shortcut = nn.Conv2d(inputs, channels, 1, stride) if stride != 1 or inputs != channels else None

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


def resnet18(init):
    model = nn.Sequential(
        nn.BatchNorm2d(1, eps=1e-5, momentum=0.1), nn.Conv2d(1, 64, 3), nn.MaxPool2d(3, 2),
        Residual(64, 64, 1), Residual(64, 64, 1), Residual(64, 128, 2), Residual(128, 128, 1),
        Residual(128, 256, 2), Residual(256, 256, 1), nn.AvgPool2d(3), nn.Flatten(), nn.Linear(256, 10))
    return initialised(model, init)


def graph_step(model, sgd, eager_step, x, y):
    """The training step on a batch of x's shape as one replayed CUDA graph:
    forward, loss, backward and SGD captured once (after three warm-up steps
    on a side stream, the weights then put back), each call copying its batch
    into the graph's static inputs. A batch of another size runs eager_step."""
    import copy
    static_x, static_y = x.clone(), y.clone()
    kept = copy.deepcopy(model.state_dict())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager_step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    model.load_state_dict(kept)  # (in place: the graph captures these tensors)
    graph = torch.cuda.CUDAGraph()
    sgd.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = F.cross_entropy(model(static_x), static_y)
        loss.backward()
        sgd.step()

    def step(x, y):
        if x.shape[0] != static_x.shape[0]:
            return eager_step(x, y)
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--model", choices=["lenet", "resnet18"], default="lenet")
    p.add_argument("--limit-train", type=int, default=0, help="train on the first N samples only (0: all)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.3)
    p.add_argument("--pool", choices=["avg", "max"], default="avg")
    p.add_argument("--init", choices=["xavier", "normal"], default="xavier")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    p.add_argument("--compile", action="store_true", help='torch.compile(mode="reduce-overhead")')
    p.add_argument("--graph", action="store_true",
                   help="the whole step captured in one CUDA graph, replayed each step (--device cuda)")
    p.add_argument("--data", default="", help="directory of the IDX files")
    p.add_argument("--tf32", action="store_true",
                   help="TF32 tensor cores for convolutions and matrix products (default: FP32 throughout)")
    a = p.parse_args()
    if a.epochs < 1 or a.batch < 1 or a.lr <= 0:
        p.error("--epochs and --batch must be at least 1, --lr positive")
    if a.graph and a.compile:
        p.error("--graph and --compile are two ways to run the step: give one")
    if a.graph and a.device != "cuda":
        p.error("--graph captures the step in a CUDA graph: it needs --device cuda")
    if torch is None:
        print(f"pytorch_lenet.py: needs PyTorch and numpy (pip install torch numpy): {import_error}", file=sys.stderr)
        sys.exit(2)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("pytorch_lenet.py: --device cuda, but torch sees no CUDA GPU")
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.manual_seed(a.seed)

    data = find_data(a.data)
    def images(stem):
        return torch.from_numpy(read_idx(data, stem).copy()).to(device).float().div_(255).unsqueeze(1)
    def labels(stem):
        return torch.from_numpy(read_idx(data, stem).astype(np.int64)).to(device)
    x_train, y_train = images("train-images-idx3"), labels("train-labels-idx1")
    if a.limit_train > 0:
        x_train, y_train = x_train[:a.limit_train], y_train[:a.limit_train]
    x_test, y_test = images("t10k-images-idx3"), labels("t10k-labels-idx1")
    count = x_train.shape[0]

    model = (lenet(a.pool, a.init) if a.model == "lenet" else resnet18(a.init)).to(device)
    sgd = torch.optim.SGD(model.parameters(), lr=a.lr)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()

    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit(f"pytorch_lenet.py: --compile needs PyTorch 2 (this is {torch.__version__})")
        step = torch.compile(step, mode="reduce-overhead")
    if a.graph:
        step = graph_step(model, sgd, step, x_train[:a.batch], y_train[:a.batch])
    order_rng = torch.Generator(device=device)
    order_rng.manual_seed(a.seed)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    mode = " with torch.compile(mode=reduce-overhead)" if a.compile else " as one CUDA graph a step" if a.graph else ", eager"
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}"
          f"{mode}; {a.model}, "
          f"batch {a.batch}, lr {a.lr}, {a.pool + ' pool, ' if a.model == 'lenet' else ''}{a.init} init, "
          f"{'TF32' if a.tf32 else 'FP32'}", flush=True)
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = torch.randperm(count, device=device, generator=order_rng)
        sync()
        start = time.perf_counter()
        for first in range(0, count, a.batch):
            picked = order[first:first + a.batch]
            step(x_train[picked], y_train[picked])
        sync()
        seconds = time.perf_counter() - start
        model.eval()  # batch norm: the running statistics
        with torch.no_grad():
            correct = sum(int((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum())
                          for i in range(0, x_test.shape[0], 1000))
        print(f"epoch {epoch} time {seconds:.4f} s  {count / seconds:,.0f} samples/s  "
              f"test_acc {correct / x_test.shape[0]:.4f}", flush=True)


if __name__ == "__main__":
    main()
