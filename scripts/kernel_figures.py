#!/usr/bin/env python3
"""Static figures of dptrain's CUDA kernels, for a GPU that is not here.

Two tables, in Markdown, on stdout:

1. Every kernel of kernels/cuda/ as nvcc compiles it for one architecture
   (default sm_90, the H100): registers, shared memory, spills (ptxas -v),
   and the instruction mix of its main loop read from the SASS
   (cuobjdump -sass): the loop, of those a backward branch closes, with the
   most FFMA (or tensor-core MMA); the share of FFMA + MMA among its
   instructions; how many of them are shared-memory loads (LDS); and how
   many global loads a thread issues in a row before it stores into shared
   memory (how many it has in flight as it stages a tile or a chunk).

2. One training step's work at a real batch, as the emulated GPU's build
   (-Demulated_gpu=true) queues or records it (DPTRAIN_EMULATED_LAUNCH_LOG):
   each kernel with its grid, its blocks against the GPU's multiprocessors
   (waves), and its occupancy from table 1's registers and shared memory
   (a launch names its kernel and parameter types; of instances alike but
   for a template constant, the one whose __launch_bounds__ are the
   launch's block, else the one with the most registers); and the count of
   kernels and of graph nodes a step.

Nothing here is a time: these are the counts a GPU's timings are made of.
Needs nvcc (or, with --objects, a CUDA build); cuobjdump and nvdisasm come with a full CUDA toolkit, and where
they are missing this script installs them from PyPI (nvidia-cuda-cuobjdump,
nvidia-cuda-nvdisasm) into build-sass/tools/.

  scripts/kernel_figures.py                       # LeNet, batch 256, sm_90
  scripts/kernel_figures.py --model resnet18      # one ResNet-18 step (slow:
                                                  # the emulated GPU records it)
  scripts/kernel_figures.py --emulated build-emulated --arch sm_80
  scripts/kernel_figures.py --tf32                # the step of dptrain --tf32
  scripts/kernel_figures.py --objects build/kernels/cuda/libdptrain_cuda_kernels.a
                        # table 1 from what a CUDA build compiled, not compiled again
  scripts/kernel_figures.py --counts [--update-docs]
                        # the kernels a step of LeNet, LeNet --tf32 and ResNet-18
                        # alone (no nvcc); --update-docs writes that table into
                        # docs/performance.md (<!-- kernel-counts -->)

Exit status: 0, or 2 for bad arguments or a missing tool or build; with
--check, 1 when a kernel of the step is not among the compiled ones.
"""
import argparse
import collections
import concurrent.futures
import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "build-sass")  # --work: cubins, the launch log, PyPI's tools

# Per multiprocessor, from CUDA's occupancy tables (compute capability 8.0
# and 9.0): registers, threads, resident blocks, shared memory (bytes; each
# block also takes the 1,024 bytes the system reserves), and the GPU's count.
ARCHES = {
    "sm_90": dict(name="H100 SXM", sms=132, regs=65536, threads=2048, blocks=32, smem=233472),
    "sm_80": dict(name="A100", sms=108, regs=65536, threads=2048, blocks=32, smem=167936),
}


def die(message):
    print(f"kernel_figures.py: {message}", file=sys.stderr)
    sys.exit(2)


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        die(f"{' '.join(cmd[:3])} ... failed:\n{result.stderr[-3000:]}")
    return result


def find_tool(name):
    for path in (shutil.which(name), f"/usr/local/cuda/bin/{name}"):
        if path and os.access(path, os.X_OK):
            return path
    return None


def sass_tools():
    """cuobjdump, and the environment to run it in (nvdisasm, which it runs,
    on PATH): the toolkit's, or PyPI's (installed once)."""
    def with_nvdisasm(cuobjdump, tool_dir):
        return cuobjdump, dict(os.environ, PATH=tool_dir + os.pathsep + os.environ.get("PATH", ""))

    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump and nvdisasm:
        return with_nvdisasm(cuobjdump, os.path.dirname(nvdisasm))
    target = os.path.join(WORK, "tools")
    bins = glob.glob(os.path.join(target, "nvidia", "*", "bin"))
    if not bins:
        print("cuobjdump or nvdisasm is missing: installing them from PyPI into build-sass/tools/",
              file=sys.stderr)
        run([sys.executable, "-m", "pip", "install", "--quiet", "--target", target,
             "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"])
        bins = glob.glob(os.path.join(target, "nvidia", "*", "bin"))
    if not bins:
        die("no cuobjdump after installing nvidia-cuda-cuobjdump")
    for tool in glob.glob(os.path.join(bins[0], "*")):
        os.chmod(tool, 0o755)
    return with_nvdisasm(os.path.join(bins[0], "cuobjdump"), bins[0])


def demangle(names, types=False):
    if not names:
        return []
    out = run(["c++filt"] + (["-t"] if types else []), input="\n".join(names) + "\n").stdout
    return out.splitlines()


def split_params(text):
    """(what comes before the last top-level parenthesis group, that group)."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if text[i] == "(" and depth == 0:
            return text[:i], text[i:]
    return text, ""


def key_of(demangled):
    """A kernel's parameter types, the same from nvcc's symbol and from the
    emulated build's type of its pointer: anonymous namespaces spelled one
    way, spaces gone."""
    text = re.sub(r"_GLOBAL__N__\w+|\(anonymous namespace\)", "anon", demangled).replace(" ", "")
    return split_params(text)[1]


def base_name(demangled):
    head = re.sub(r"_GLOBAL__N__\w+|\(anonymous namespace\)", "anon", demangled).split("(")[0].split("<")[0].strip()
    return head.split("::")[-1].split()[-1]


# ---- table 1: the kernels as compiled ----

def compile_kernels(arch):
    nvcc = find_tool("nvcc")
    if not nvcc:
        die("nvcc not found (on PATH or in /usr/local/cuda/bin): the figures are of nvcc's machine code")
    os.makedirs(WORK, exist_ok=True)
    sources = sorted(glob.glob(os.path.join(ROOT, "kernels", "cuda", "*.cu")))

    def compile_one(source):
        stem = os.path.splitext(os.path.basename(source))[0]
        cubin = os.path.join(WORK, f"{stem}.{arch}.cubin")
        # As kernels/cuda/meson.build builds them (-O3, C++17), for one architecture.
        ptxas = run([nvcc, "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-I", os.path.join(ROOT, "kernels"),
                     "-Xptxas", "-v", "-o", cubin, source]).stderr
        return stem, cubin, ptxas

    # One nvcc a core, the largest sources first so that the long compiles
    # start at once; the results are read in the sources' order.
    by_size = sorted(sources, key=os.path.getsize, reverse=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        compiled = dict(zip(by_size, pool.map(compile_one, by_size)))
    kernels = {}  # mangled name -> figures
    for source in sources:
        stem, cubin, ptxas = compiled[source]
        current = None
        for line in ptxas.splitlines():
            if m := re.search(r"Compiling entry function '(\w+)'", line):
                current = kernels.setdefault(m.group(1), {"file": stem + ".cu", "cubin": cubin})
            elif current is not None and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
                current["spills"] = int(m.group(1)) + int(m.group(2))
            elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
                current["regs"] = int(m.group(1))
                s = re.search(r"(\d+) bytes smem", line)
                current["smem"] = int(s.group(1)) if s else 0
    return kernels


def kernels_of_objects(paths, arch, cuobjdump, env):
    """Table 1's figures from what a build has compiled (object files or the
    static library of kernels/cuda/, built for `arch` among others): the same
    machine code as compile_kernels' (kernels/cuda/meson.build compiles with
    the same options, and -lineinfo changes no instruction), without nvcc.
    ptxas's spill report is not kept in an object; a kernel's stack frame,
    where spilled registers would go, is, and stands in its column."""
    files = []
    for path in paths:
        if not os.path.isfile(path):
            die(f"--objects: {path} not found (build it with a CUDA toolkit: scripts/build.sh)")
        with open(path, "rb") as f:
            thin = f.read(8) == b"!<thin>\n"
        # Meson's static libraries are thin archives, which name their
        # members' files (beside the archive) and which cuobjdump cannot read.
        files += ([os.path.join(os.path.dirname(path), m) for m in run(["ar", "t", path]).stdout.split()]
                  if thin else [path])
    kernels = {}
    for path in files:
        stem, current = os.path.basename(path).split(".")[0], None
        for line in run([cuobjdump, "-res-usage", "-arch", arch, path], env=env).stdout.splitlines():
            if m := re.match(r"member .*:([^:/]+?)\.cu\.o:$", line.strip()):
                stem = m.group(1)
            elif m := re.match(r"\s*Function (\w+):", line):
                current = kernels.setdefault(m.group(1), {"file": stem + ".cu", "cubin": path})
            elif current is not None and (m := re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", line)):
                # (Its shared memory, on the architectures of ARCHES, counts
                # the 1,024 bytes the system reserves a block that uses any; ptxas's
                # figure, to which occupancy() adds it, does not.)
                shared = int(m.group(3))
                current.update(regs=int(m.group(1)), spills=int(m.group(2)), smem=max(shared - 1024, 0))
    if not kernels:
        die(f"--objects: no kernel compiled for {arch} in {' '.join(paths)} "
            f"(its build's gpu_archs must include {arch.removeprefix('sm_')})")
    return kernels


def loop_mix(instructions, products=1):
    """The main loop of a function's SASS (address, opcode, operands list):
    of the ranges a backward branch closes, the one with the most FFMA/MMA
    (the shortest of equals). A kernel of `products` products has as many
    main loops, each outside the others: of those, the one whose share of
    FFMA + MMA is the lowest. Returns (ffma, mma, lds, count) or None."""
    loops = []
    for address, opcode, operands in instructions:
        if not opcode.startswith("BRA"):
            continue
        m = re.search(r"0x([0-9a-f]+)", operands)
        if not m or int(m.group(1), 16) >= address:
            continue
        start = int(m.group(1), 16)
        body = [op for a, op, _ in instructions if start <= a <= address and op != "NOP"]
        ffma = sum(op.startswith("FFMA") for op in body)
        mma = sum(op.startswith(("HMMA", "IMMA", "HGMMA")) for op in body)
        lds = sum(op.startswith("LDS") for op in body)
        if ffma + mma > 0:
            loops.append(((ffma + mma, -len(body)), (start, address), (ffma, mma, lds, len(body))))
    main = []
    for score, (start, end), mix in sorted(loops, reverse=True):
        if len(main) < products and all(end < s or start > e for _, (s, e), _ in main):
            main.append((score, (start, end), mix))
    if not main:
        return None
    return min((m[2] for m in main), key=lambda mix: (mix[0] + mix[1]) / mix[3])


def load_run(instructions):
    """The most global loads (LDG) the SASS lists one after another with no
    store (STS, STG) or barrier between them: how many loads a thread can
    have in flight as it copies into shared memory (a store waits on the
    load it stores). None where the kernel stores nothing to shared
    memory."""
    if not any(op.startswith("STS") for _, op, _ in instructions):
        return None
    most = run = 0
    for _, op, _ in instructions:
        if op.startswith("LDG"):
            run += 1
            most = max(most, run)
        elif op.startswith(("STS", "STG", "BAR")):
            run = 0
    return most


def read_sass(kernels, cuobjdump, env, arch):
    for cubin in sorted({k["cubin"] for k in kernels.values()}):
        # (-arch: an object holds each kernel once for every architecture it was built for.)
        text = run([cuobjdump, "-sass", "-arch", arch, cubin], env=env).stdout
        function, instructions = None, []

        def close():
            if function in kernels:
                products = 2 if "gemm_pair_kernel" in function else 1  # (tiles.cuh: two products a launch)
                kernels[function]["loop"] = loop_mix(instructions, products)
                kernels[function]["load_run"] = load_run(instructions)
                kernels[function]["instructions"] = sum(op != "NOP" for _, op, _ in instructions)

        for line in text.splitlines():
            if m := re.match(r"\s*Function : (\S+)", line):
                close()
                function, instructions = m.group(1), []
            elif m := re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);", line):
                instructions.append((int(m.group(1), 16), m.group(3), m.group(4)))
        close()


def read_launch_bounds(kernels, cuobjdump, env, arch):
    """Each kernel's __launch_bounds__ (its most threads a block), where it
    has them: the ELF's EIATTR_MAX_THREADS, in the kernel's .nv.info section.
    Table 2 tells apart by it the instances of one template that differ in a
    constant alone (the same name and parameter types) but not in their
    block's size."""
    for cubin in sorted({k["cubin"] for k in kernels.values()}):
        current, wanted = None, False
        for line in run([cuobjdump, "-elf", "-arch", arch, cubin], env=env).stdout.splitlines():
            if line.startswith(".nv.info."):
                current, wanted = kernels.get(line[len(".nv.info."):].strip()), False
            elif current is not None and line.split() == ["Attribute:", "EIATTR_MAX_THREADS"]:
                wanted = True
            elif wanted and line.strip().startswith("Value:"):
                current["max_threads"] = math.prod(int(v, 16) for v in line.split()[1:4])
                wanted = False


def occupancy(k, threads, arch):
    """Resident blocks per multiprocessor and the share of its warps they fill."""
    a = ARCHES[arch]
    warps = math.ceil(threads / 32)
    regs_per_warp = math.ceil(max(k.get("regs", 0), 1) * 32 / 256) * 256
    by_regs = (a["regs"] // regs_per_warp) // warps
    by_smem = a["smem"] // (k.get("smem", 0) + 1024)
    blocks = min(a["blocks"], a["threads"] // (warps * 32), by_regs, by_smem)
    return blocks, blocks * warps / (a["threads"] // 32)


# ---- table 2: one step's work on the emulated GPU ----

def is_update(fields):
    """A log line of the SGD update, which ends a training step ("sgd", or
    "sgd_checked" on the replica that also watches for divergence)."""
    return len(fields) > 2 and re.fullmatch(r"kernel sgd(_checked)?", fields[2]) is not None


def record_step(emulated, model, batch, tf32):
    dptrain = os.path.join(emulated, "dptrain")
    if not os.access(dptrain, os.X_OK):
        die(f"{dptrain} not found: build the emulated GPU first "
            f"(DPTRAIN_BUILD_DIR={os.path.relpath(emulated, ROOT)} scripts/build.sh -Demulated_gpu=true -Dtests=disabled)")
    log = os.path.join(WORK, f"launches.{model}.{batch}{'.tf32' if tf32 else ''}.log")
    # The second step, from after the first one's update: the first step
    # is like every other but for the work of the update's wake (batch
    # norm's running statistics, which follow the update), which it lacks.
    steps = 2
    env = dict(os.environ, DPTRAIN_EMULATED_LAUNCH_LOG=log, DPTRAIN_EMULATED_GPUS="1")
    cmd = [dptrain, "--gpus", "1", "--model", model, "--batch", str(batch), "--limit-train", str(steps * batch),
           "--limit-test", "64", "--epochs", "1"] + (["--tf32"] if tf32 else [])
    print(f"recording {steps} step(s) of {model} at batch {batch} on the emulated GPU ...", file=sys.stderr)
    os.makedirs(WORK, exist_ok=True)  # (with --objects and the tools on PATH, nothing has made it yet)
    if os.path.exists(log):
        os.remove(log)  # a log from an earlier run would end the wait below at once
    started = time.monotonic()
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # The epoch is recorded as a graph before it runs: once the log holds
    # the last step's update, what a step queues is known, and running it on
    # the CPU would add nothing to these counts.
    while process.poll() is None:
        time.sleep(0.5)
        if os.path.exists(log) and sum(is_update(l.split("\t")) for l in open(log)) >= steps:
            process.send_signal(signal.SIGKILL)
            process.wait()
            break
    else:
        if process.returncode != 0:
            die(f"{' '.join(cmd)} failed:\n{process.stderr.read()[-2000:]}")
    print(f"  ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if not os.path.exists(log):
        die(f"{' '.join(cmd)} wrote no launch log to {log}:\n{process.stderr.read()[-2000:]}")
    lines = [l.rstrip("\n").split("\t") for l in open(log)]
    # The last step: from after the update before it to its own update.
    updates = [i for i, f in enumerate(lines) if is_update(f)]
    first = updates[-2] + 1 if len(updates) >= 2 else next(i for i, f in enumerate(lines) if f[1] == "captured")
    return lines[first:updates[-1] + 1]


def print_counts(emulated, batch, update_docs):
    """The kernels (and pieces of work: graph nodes) of one training step,
    as the emulated GPU records it, for each model and arithmetic."""
    rows = []
    for model, tf32 in (("lenet", False), ("lenet", True), ("resnet18", False), ("resnet18", True)):
        work = record_step(emulated, model, batch, tf32)
        kernels = sum(1 for f in work if f[2].startswith("kernel "))
        rows.append(f"| {model}{' --tf32' if tf32 else ''} | {kernels} | {len(work)} |")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    table = "\n".join([f"| one training step, batch {batch}, one GPU | kernels | graph nodes |",
                        "| --- | ---: | ---: |", *rows, "",
                        f"{time.strftime('%Y-%m-%d')}, commit {commit}; `scripts/kernel_figures.py --counts "
                        f"--update-docs` (the emulated GPU's launch log of the second step: the same on any GPU)."])
    print(table)
    if update_docs:
        subprocess.run([os.path.join(ROOT, "scripts", "update_docs.py"), "kernel-counts"], input=table + "\n",
                       text=True, check=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="sm_90", choices=sorted(ARCHES))
    p.add_argument("--model", default="lenet", choices=["lenet", "resnet18"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--emulated", default=os.path.join(ROOT, "build-emulated"),
                   help="the emulated GPU's build folder (for table 2)")
    p.add_argument("--no-step", action="store_true", help="table 1 only")
    p.add_argument("--tf32", action="store_true", help="record the step of dptrain --tf32 (tensor cores)")
    p.add_argument("--work", default=WORK, help="where cubins, the launch log and PyPI's tools go")
    p.add_argument("--objects", nargs="+", metavar="FILE",
                   help="read the kernels from a CUDA build's objects or its static library "
                        "(built for --arch among others) instead of compiling them")
    p.add_argument("--counts", action="store_true",
                   help="only the kernels and pieces of work a step of LeNet, LeNet --tf32 and ResNet-18")
    p.add_argument("--update-docs", action="store_true",
                   help="with --counts: write that table into docs/performance.md (scripts/update_docs.py)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every kernel of the step was found among the compiled ones (a test)")
    args = p.parse_args()
    globals()["WORK"] = os.path.abspath(args.work)
    if args.batch < 1:
        die(f"--batch must be a positive count (got {args.batch})")
    if args.update_docs and not args.counts:
        die("--update-docs writes the table of --counts: give both")
    if args.counts:
        return print_counts(os.path.abspath(args.emulated), args.batch, args.update_docs)

    tools = sass_tools()
    kernels = kernels_of_objects(args.objects, args.arch, *tools) if args.objects else compile_kernels(args.arch)
    read_sass(kernels, *tools, args.arch)
    read_launch_bounds(kernels, *tools, args.arch)
    names = list(kernels)
    for name, pretty in zip(names, demangle(names)):
        kernels[name]["pretty"] = pretty
        kernels[name]["key"] = base_name(pretty) + key_of(pretty)
        short = re.sub(r"dpt::cuda::|dpt::|_GLOBAL__N__\w+::|\(anonymous namespace\)::|tiled::|\bconv::", "", pretty)
        kernels[name]["label"] = split_params(short)[0].removeprefix("void ")

    arch = ARCHES[args.arch]
    print(f"## The kernels as nvcc compiles them for {args.arch} ({arch['name']})\n")
    if args.objects:
        print(f"Read from {', '.join(os.path.relpath(o) for o in args.objects)}. An object does not keep "
              f"ptxas's report of spills: its column holds each kernel's stack frame, where spills go.\n")
    print("Main loop: the loop with the most FFMA/MMA; its share of FFMA + MMA, and its LDS, "
          "among its instructions (`gemm_pair_kernel`, two products: of their two main loops, "
          "the one with the lower share). Loads before a store: the most global loads (LDG) in a row "
          "with no store (STS, STG) or barrier between them, so how many a thread has in flight "
          "as it stages into shared memory (- where it stores nothing there).\n")
    print(f"| file | kernel | registers | shared (B) | {'stack' if args.objects else 'spills'} (B) "
          f"| main loop: instructions | FFMA+MMA | LDS | loads before a store |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in sorted(kernels, key=lambda n: (kernels[n]["file"], kernels[n]["pretty"])):
        k = kernels[name]
        loop = k.get("loop")
        mix = (f"{loop[3]:g} | {100 * (loop[0] + loop[1]) / loop[3]:.0f}% | {loop[2]:g}" if loop else "- | - | -")
        run = k.get("load_run")
        print(f"| {k['file']} | `{k['label']}` | {k.get('regs', '?')} | {k.get('smem', 0)} | {k.get('spills', 0)} "
              f"| {mix} | {'-' if run is None else run} |")

    if args.no_step:
        return
    work = record_step(os.path.abspath(args.emulated), args.model, args.batch, args.tf32)
    signatures = [f[5] for f in work if f[2].startswith("kernel ")]
    by_key = collections.defaultdict(list)
    for k in kernels.values():
        by_key[k["key"]].append(k)
    sig_keys = dict(zip(signatures, demangle(signatures, types=True)))
    print(f"\n## One training step of {args.model}{' --tf32' if args.tf32 else ''} at batch {args.batch} on one GPU, "
          f"as the emulated GPU records it\n")
    print(f"Waves: blocks / ({arch['sms']} multiprocessors x resident blocks each).\n")
    print("| # | work | grid | blocks | threads | registers | resident blocks/SM | occupancy | waves |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    kernels_in_step, small, gemm_shares, unmatched = 0, [], [], []
    for i, f in enumerate(work, 1):
        if not f[2].startswith("kernel "):
            print(f"| {i} | {f[2]} | | | | | | | |")
            continue
        kernels_in_step += 1
        name = f[2].split(" ", 1)[1]
        grid = [int(x) for x in f[3].split(",")]
        block = [int(x) for x in f[4].split(",")]
        blocks, threads = math.prod(grid), math.prod(block)
        matches = by_key.get(name + key_of(sig_keys[f[5]]), [])
        if not matches:
            unmatched.append(name)
            print(f"| {i} | {name} | {'x'.join(map(str, grid))} | {blocks} | {threads} | ? | | | |")
            continue
        # Instances alike but for template values: those whose launch bounds
        # are this launch's block, where that tells them apart; of those, the larger.
        matches = [m for m in matches if m.get("max_threads") == threads] or matches
        k = max(matches, key=lambda m: m.get("regs", 0))
        if blocks < arch["sms"]:
            small.append(i)
        if name.startswith(("gemm_kernel", "gemm_pair_kernel")) and k.get("loop"):
            loop = k["loop"]
            gemm_shares.append(((loop[0] + loop[1]) / loop[3], i, loop[1] > 0))
        resident, occ = occupancy(k, threads, args.arch)
        waves = blocks / (arch["sms"] * resident) if resident else float("inf")
        shown = k["label"] if len(matches) == 1 else f"{name} (one of {len(matches)} alike)"
        print(f"| {i} | `{shown}` | {'x'.join(map(str, grid))} | {blocks} | {threads} | {k.get('regs')} | "
              f"{resident} | {100 * occ:.0f}% | {waves:.2f} |")
    recorded = "graph nodes" if work and work[0][1] == "captured" else "queued, not recorded as a graph"
    print(f"\n- {kernels_in_step} kernels and {len(work)} pieces of work a step ({recorded}).")
    if gemm_shares:
        shares = [share for share, _, _ in gemm_shares]
        print(f"- GEMM main loops of the step: FFMA+MMA {100 * min(shares):.0f}% to "
              f"{100 * max(shares):.0f}% of their instructions.")
        # FP32 loops against the aim of 60% FFMA, unrounded (a tensor-core
        # loop's MMA does 8 FFMA's work a lane and is not held to it).
        below = [f"#{i} ({100 * share:.2f}%)" for share, i, mma in gemm_shares if share < 0.6 and not mma]
        fp32 = [share for share, _, mma in gemm_shares if not mma]
        if fp32:
            print(f"- FP32 GEMM main loops under 60% FFMA: {', '.join(below) if below else 'none'} "
                  f"(the lowest {100 * min(fp32):.2f}%).")
    print(f"- {len(small)} of the {kernels_in_step} kernels have fewer blocks than the {arch['sms']} "
          f"multiprocessors: {', '.join(f'#{i}' for i in small[:12]) or 'none'}"
          f"{f' and {len(small) - 12} more' if len(small) > 12 else ''}.")
    if unmatched:
        print(f"- not found among the compiled kernels (shown with ?): {', '.join(sorted(set(unmatched)))}.")
    if args.check and (unmatched or kernels_in_step == 0):
        sys.exit(1)


if __name__ == "__main__":
    main()
