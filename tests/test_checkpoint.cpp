// The checkpoint format: a round trip restores every field bit for bit, and
// every kind of damage is caught with its own message (never a crash, never
// a silently wrong run). tests/test_cli.sh drives the same promises through
// the real binary: resume, signals, a crash mid-write.
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>

#include "run/checkpoint.hpp"
#include "run/cli.hpp"
#include "base/errors.hpp"
#include "model/lenet.hpp"
#include "run/trainer.hpp"  // init_params

using namespace dpt;

namespace {

Checkpoint example() {
    Checkpoint k;
    k.settings.devices = DeviceChoice::of(DeviceKind::cpu, 3);
    k.settings.processes = 2;  // under mpirun: 6 devices in all
    k.settings.allreduce = "naive";
    k.settings.batch = 511;
    k.settings.split = {SplitMode::automatic, {300, 200, 11}};  // as --split auto measured it
    k.settings.lr = 0.1f + 0.2f;  // not the float nearest 0.3: must come back as these very bits
    k.settings.warmup = 0.1 + 0.2;  // likewise, a double
    k.settings.seed = 18446744073709551615ULL;
    k.settings.pool = PoolKind::max;
    k.settings.init = InitKind::normal;
    k.settings.limit_train = 12345;
    k.settings.limit_test = 678;
    k.settings.epochs = 9;
    k.settings.checkpoint_every = 2;
    k.position = {4, 17, 1234.5678901234567};
    k.params = init_params(InitKind::xavier, 11);
    k.params[0] = -0.0f;
    k.params[1] = std::nextafter(0.0f, 1.0f);  // a denormal
    return k;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The message decode_checkpoint gives, or "" when it accepts the bytes.
std::string rejection(const std::string& bytes) {
    try {
        decode_checkpoint(bytes_of(bytes), "ck");
        return "";
    } catch (const InputError& e) {
        return e.what();
    }
}

// `bytes` with its checksum line recomputed, as if a well-behaved writer had made it.
std::string resealed(std::string bytes) {
    const size_t crc_at = bytes.rfind("crc32 ");
    bytes.resize(crc_at);
    char trailer[32];
    std::snprintf(trailer, sizeof trailer, "crc32 %08lx\n",
                  crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
    return bytes + trailer;
}

}  // namespace

TEST_CASE("a checkpoint reads back exactly what was written", "[checkpoint]") {
    const Checkpoint k = example();
    const std::string bytes = encode_checkpoint(k);
    const Checkpoint back = decode_checkpoint(bytes_of(bytes), "ck");
    const TrainConfig &a = k.settings, &b = back.settings;
    CHECK(b.devices == a.devices);
    CHECK(b.processes == 2);
    CHECK(b.allreduce == a.allreduce);
    CHECK(b.batch == a.batch);
    CHECK(b.split.mode == SplitMode::automatic);
    CHECK(b.split.counts == a.split.counts);
    CHECK(std::memcmp(&b.lr, &a.lr, sizeof a.lr) == 0);
    CHECK(std::memcmp(&b.warmup, &a.warmup, sizeof a.warmup) == 0);
    CHECK(b.seed == a.seed);
    CHECK(b.pool == a.pool);
    CHECK(b.init == a.init);
    CHECK(b.limit_train == a.limit_train);
    CHECK(b.limit_test == a.limit_test);
    CHECK(b.epochs == a.epochs);
    CHECK(b.checkpoint_every == a.checkpoint_every);
    CHECK(back.position.epoch == 4);
    CHECK(back.position.step == 17);
    CHECK(std::memcmp(&back.position.loss_sum, &k.position.loss_sum, sizeof(double)) == 0);
    REQUIRE(back.params.size() == lenet::model().param_count());
    CHECK(std::memcmp(back.params.data(), k.params.data(), k.params.size() * sizeof(float)) == 0);
    // Deterministic: the same checkpoint, the same bytes.
    CHECK(encode_checkpoint(back) == bytes);

    SECTION("a ResNet-18 checkpoint names its model and batch norm mode, and reads back as such") {
        Checkpoint r = k;
        r.settings.model = ModelKind::resnet18;
        r.settings.bn = BatchNormMode::sync;
        r.params = init_params(InitKind::xavier, 12, model_of(ModelKind::resnet18));
        const std::string resnet = encode_checkpoint(r);
        CHECK(resnet.find("\nmodel resnet18\nbn sync\n") != std::string::npos);
        const Checkpoint again = decode_checkpoint(bytes_of(resnet), "ck");
        CHECK(again.settings.model == ModelKind::resnet18);
        CHECK(again.settings.bn == BatchNormMode::sync);
        CHECK(again.params == r.params);
        // Batch norm's gamma and running variance start at one.
        CHECK(r.params[model_of(ModelKind::resnet18).tensor("bn3.gamma").offset] == 1.0f);
        CHECK(r.params[model_of(ModelKind::resnet18).tensor("bn3.running_var").offset + 5] == 1.0f);
        CHECK(r.params[model_of(ModelKind::resnet18).tensor("bn3.running_mean").offset] == 0.0f);
    }
}

TEST_CASE("a checkpoint cut short anywhere is reported as truncated", "[checkpoint]") {
    const std::string bytes = encode_checkpoint(example());
    const size_t header = bytes.find("data float32-le");
    // Every offset in the header, then every 997th byte of the data, then the trailer.
    std::vector<size_t> cuts;
    for (size_t at = 0; at < header + 40; ++at) cuts.push_back(at);
    for (size_t at = header + 40; at < bytes.size(); at += 997) cuts.push_back(at);
    for (size_t at = bytes.size() - 16; at < bytes.size(); ++at) cuts.push_back(at);
    for (size_t at : cuts) {
        CAPTURE(at);
        const std::string why = rejection(bytes.substr(0, at));
        CHECK(why.find("ck: truncated") == 0);
    }
}

TEST_CASE("a changed byte anywhere in a checkpoint is caught", "[checkpoint]") {
    const std::string bytes = encode_checkpoint(example());
    const size_t first_line = bytes.find('\n');
    for (size_t at = first_line + 1; at < bytes.size(); at += at < 1000 ? 1 : 1009) {
        std::string damaged = bytes;
        damaged[at] = char(damaged[at] ^ 0x10);
        CAPTURE(at);
        const std::string why = rejection(damaged);
        // Most bytes are covered by the CRC; in the data line and the trailer,
        // damage shows as a wrong length or a broken checksum line.
        CHECK((why.find("ck: corrupted") == 0 || why.find("ck: truncated") == 0));
    }
    CHECK(rejection(bytes + "x").find("ck: corrupted (1 unexpected bytes after its end)") == 0);
}

TEST_CASE("a checkpoint of another format version, model or kind of file is named as such", "[checkpoint]") {
    const std::string bytes = encode_checkpoint(example());
    const std::string split_line = "split auto 300 200 11\n", model_lines = "model lenet\nbn local\n";
    const std::string math_line = "math fp32\n";
    const size_t split_at = bytes.find(split_line);
    REQUIRE(split_at != std::string::npos);
    REQUIRE(bytes.find(model_lines) == split_at + split_line.size());
    const std::string processes_line = "processes 2\n";
    REQUIRE(bytes.find("devices cpu 3\n" + processes_line) != std::string::npos);
    REQUIRE(bytes.find(model_lines + math_line) == split_at + split_line.size());
    // The bytes as version `v` (before 5) wrote them, but for the lines
    // versions 1 to 4 added, which each section removes: no processes or
    // math line.
    const auto older = [&](int v) {
        std::string old = bytes;
        old.replace(0, std::strlen("dptrain-checkpoint 6"), "dptrain-checkpoint " + std::to_string(v));
        old.erase(old.find(processes_line), processes_line.size());
        old.erase(old.find(math_line), math_line.size());
        return old;
    };
    SECTION("another version") {
        std::string v7 = bytes;
        v7.replace(0, std::strlen("dptrain-checkpoint 6"), "dptrain-checkpoint 7");
        CHECK(rejection(resealed(v7)) == "ck: checkpoint format version 7; this dptrain reads versions 1 to 6");
    }
    SECTION("version 5, written before --tf32, reads as FP32; version 6's math line is fp32 or tf32") {
        std::string v5 = bytes;
        v5.replace(0, std::strlen("dptrain-checkpoint 6"), "dptrain-checkpoint 5");
        v5.erase(v5.find(math_line), math_line.size());
        CHECK(decode_checkpoint(bytes_of(resealed(v5)), "ck").settings.math == Math::fp32);
        std::string tf32 = bytes;
        tf32.replace(tf32.find(math_line), math_line.size(), "math tf32\n");
        CHECK(decode_checkpoint(bytes_of(resealed(tf32)), "ck").settings.math == Math::tf32);
        std::string bad = bytes;
        bad.replace(bad.find(math_line), math_line.size(), "math fp16\n");
        CHECK(rejection(resealed(bad)).find("ck: corrupted header") == 0);
    }
    SECTION("version 4, written before mpirun, reads as one process") {
        std::string v4 = older(4);
        const Checkpoint back = decode_checkpoint(bytes_of(resealed(v4)), "ck");
        CHECK(back.settings.processes == 1);
        CHECK(back.settings.model == ModelKind::lenet);
        CHECK(back.settings.batch == 511);
        // A version 4 header has no processes line.
        CHECK(rejection(resealed(v4.replace(v4.find("devices cpu 3\n") + 14, 0, "processes 2\n")))
                  .find("ck: corrupted header") == 0);
    }
    SECTION("the processes line: a whole number from 1, and a batch with a sample for every device of them all") {
        const auto with_processes = [&](const std::string& line) {
            std::string other = bytes;
            other.replace(bytes.find(processes_line), processes_line.size(), line);
            return resealed(other);
        };
        CHECK(decode_checkpoint(bytes_of(with_processes("processes 170\n")), "ck").settings.processes == 170);
        for (const char* bad : {"processes 0\n", "processes -1\n", "processes two\n", "processes 171\n"}) {
            CAPTURE(bad);  // 171 processes of 3 devices would leave some without a sample of 511
            CHECK(rejection(with_processes(bad)).find("ck: corrupted header (") == 0);
        }
    }
    SECTION("version 3, written before --model, reads as LeNet") {
        std::string v3 = older(3);
        v3.erase(v3.find(model_lines), model_lines.size());
        const Checkpoint back = decode_checkpoint(bytes_of(resealed(v3)), "ck");
        CHECK(back.settings.model == ModelKind::lenet);
        CHECK(back.settings.batch == 511);
    }
    SECTION("a model line that does not name the model of the tensors") {
        std::string other = bytes;
        other.replace(split_at + split_line.size(), std::strlen("model lenet"), "model resnet18");
        CHECK(rejection(resealed(other)).find("ck: corrupted header (model line") == 0);
    }
    SECTION("version 2, written before --split, reads as an even split") {
        std::string v2 = older(2);
        v2.erase(v2.find(split_line), split_line.size() + model_lines.size());
        const Checkpoint back = decode_checkpoint(bytes_of(resealed(v2)), "ck");
        CHECK(back.settings.split.mode == SplitMode::even);
        CHECK(back.settings.split.counts.empty());
        CHECK(back.settings.batch == 511);
    }
    SECTION("the devices line: one kind, or a mixed run's GPUs then CPUs (version 3 on)") {
        const size_t at = bytes.find("devices cpu 3\n");
        REQUIRE(at != std::string::npos);
        const auto with_devices = [&](const std::string& line) {
            std::string other = bytes;
            other.replace(at, std::strlen("devices cpu 3\n"), line);
            return resealed(other);
        };
        const Checkpoint mixed = decode_checkpoint(bytes_of(with_devices("devices cuda 1 cpu 2\n")), "ck");
        CHECK(mixed.settings.devices == DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2));
        CHECK(encode_checkpoint(mixed).find("\ndevices cuda 1 cpu 2\n") != std::string::npos);
        CHECK(decode_checkpoint(bytes_of(with_devices("devices cuda 3\n")), "ck").settings.devices ==
              DeviceChoice::of(DeviceKind::gpu, 3));
        for (const char* bad : {"devices cpu 1 cuda 2\n", "devices cuda 1 cpu\n", "devices cuda 0 cpu 3\n",
                                "devices cpu 3 cpu 1\n", "devices gpu 3\n", "devices cuda 1 cpu 2 cpu 1\n"}) {
            CAPTURE(bad);
            CHECK(rejection(with_devices(bad)).find("ck: corrupted header (devices '") == 0);
        }
    }
    SECTION("the split line: even, weights, auto before and after measuring; nothing else") {
        const auto with_split = [&](const std::string& line) {
            std::string other = bytes;
            other.replace(split_at, split_line.size(), line);
            return resealed(other);
        };
        for (const char* good : {"split even\n", "split auto\n", "split weights 1 1 509\n"}) {
            CAPTURE(good);
            CHECK(rejection(with_split(good)) == "");
        }
        CHECK(decode_checkpoint(bytes_of(with_split("split weights 1 1 509\n")), "ck").settings.split.counts ==
              std::vector<int>{1, 1, 509});
        for (const char* bad : {"split auto 300 200\n", "split auto 300 200 12\n", "split weights\n",
                                "split even 511\n", "split auto 311 200 0\n", "split fast\n", "split auto  300 200 11\n"}) {
            CAPTURE(bad);
            CHECK(rejection(with_split(bad)).find("ck: corrupted header (split '") == 0);
        }
    }
    SECTION("version 1, written before --allreduce and --warmup, reads as naive and no warm-up") {
        std::string v1 = older(1);
        v1.erase(v1.find(split_line), split_line.size() + model_lines.size());
        const size_t at = v1.find("allreduce naive\n");
        REQUIRE(at != std::string::npos);
        v1.erase(at, std::strlen("allreduce naive\n"));
        const size_t warmup_at = v1.find("warmup ");
        REQUIRE(warmup_at != std::string::npos);
        v1.erase(warmup_at, v1.find('\n', warmup_at) + 1 - warmup_at);
        const Checkpoint back = decode_checkpoint(bytes_of(resealed(v1)), "ck");
        CHECK(back.settings.allreduce == "naive");
        CHECK(back.settings.warmup == 0);  // version 1 runs had no warm-up
        CHECK(back.settings.batch == 511);
        CHECK(back.params == example().params);
        // A version 1 header has no allreduce line.
        CHECK(rejection(resealed(v1.replace(at, 0, "allreduce naive\n"))).find("ck: corrupted header") == 0);
    }
    SECTION("an allreduce this dptrain does not know, checksum intact") {
        std::string other = bytes;
        const size_t at = other.find("allreduce naive\n");
        REQUIRE(at != std::string::npos);
        other.replace(at, std::strlen("allreduce naive"), "allreduce tree");
        CHECK(rejection(resealed(other)) ==
              "ck: corrupted header (allreduce 'tree' is not an algorithm this dptrain knows)");
    }
    SECTION("another model: a tensor of another shape, checksum intact") {
        std::string other = bytes;
        const size_t at = other.find("conv1.weight 20 ");
        REQUIRE(at != std::string::npos);
        other.replace(at, std::strlen("conv1.weight 20 "), "conv1.weight 16 ");
        CHECK(rejection(resealed(other)).find("ck: written for another model") == 0);
    }
    SECTION("a parameters file, or anything else") {
        CHECK(rejection("dptrain-params 1\nconv1.weight 20 1 3 3\n").find("is a parameters file") != std::string::npos);
        CHECK(rejection("\x89PNG\r\n\x1a\n").find("not a dptrain checkpoint") != std::string::npos);
    }
    SECTION("a header value out of range, checksum intact") {
        std::string bad = bytes;
        const size_t at = bad.find("\nbatch 511\n");
        REQUIRE(at != std::string::npos);
        bad.replace(at, std::strlen("\nbatch 511\n"), "\nbatch 2\n");  // fewer samples than the 3 devices
        CHECK(rejection(resealed(bad)).find("ck: corrupted header (batch '2' is not a valid value)") == 0);
    }
}

TEST_CASE("the settings table writes the header, reads it back and makes --resume's checks", "[checkpoint]") {
    const Checkpoint k = example();
    const TrainConfig& saved = k.settings;
    const std::string bytes = encode_checkpoint(k);
    const Checkpoint back = decode_checkpoint(bytes_of(bytes), "ck");
    size_t at = 0;
    for (const RunSetting& s : run_settings()) {
        INFO("setting " << s.key);
        // A line of its own, in the table's order, that reads back to the same text.
        const std::string line = std::string("\n").append(s.key).append(" ").append(s.text(saved)).append("\n");
        const size_t found = bytes.find(line, at);
        CHECK(found != std::string::npos);
        if (found != std::string::npos) at = found + 1;
        CHECK(s.text(back.settings) == s.text(saved));
        TrainConfig c;
        CHECK(s.read("x", c) != nullptr);
        CHECK(s.read(s.text(saved), c) == nullptr);
        CHECK(s.text(c) == s.text(saved));
    }

    // Another value of each setting a resumed run keeps (the example has max
    // pooling and normal init); a row added without one fails here.
    const std::map<std::string_view, std::vector<std::string>> other = {
        {"model", {"--model", "resnet18"}}, {"bn", {"--bn", "sync"}},     {"math", {"--tf32"}},
        {"batch", {"--batch", "512"}},      {"lr", {"--lr", "0.5"}},      {"warmup", {"--warmup", "1"}},
        {"seed", {"--seed", "3"}},          {"pool", {"--pool", "avg"}},  {"init", {"--init", "xavier"}},
        {"limit-train", {"--limit-train", "100"}}, {"limit-test", {"--limit-test", "100"}}};
    const std::string path =
        (std::filesystem::temp_directory_path() / ("dptrain-settings-" + std::to_string(getpid()) + ".ck")).string();
    save_checkpoint(path, k);
    const auto resumed = [&](std::vector<std::string> args) {
        args.insert(args.begin(), {"dptrain", "--resume", path});
        std::vector<const char*> argv;
        for (const std::string& a : args) argv.push_back(a.c_str());
        const std::optional<TrainRequest> run = parse_command_line(int(argv.size()), argv.data());
        return run ? std::optional<TrainConfig>(run->settings) : std::nullopt;
    };
    {  // What the run starts from: the checkpoint's place and parameters, apart from its settings.
        const char* argv[] = {"dptrain", "--resume", path.c_str()};
        const std::optional<TrainRequest> run = parse_command_line(3, argv);
        REQUIRE(run);
        CHECK(run->start.resuming());
        CHECK(run->start.resume_path == path);
        CHECK(run->start.position.epoch == k.position.epoch);
        CHECK(run->start.position.step == k.position.step);
        CHECK(run->start.params == k.params);
        CHECK_THAT(run->start.devices_note, Catch::Contains("the checkpoint's 6 devices (2 processes of 3 CPU devices each)"));
    }
    for (const RunSetting& s : run_settings()) {
        INFO("setting " << s.key);
        const std::string option = "--" + std::string(s.option());
        if (s.on_resume == OnResume::kept) {
            REQUIRE(other.count(s.key) == 1);
            CHECK_THROWS_WITH(resumed(other.at(s.key)),
                              Catch::Contains(option) && Catch::Contains("differs from the checkpoint's"));
            if (s.flag.empty()) {  // the saved value, repeated: no difference (other checks may refuse it:
                try {                  // --bn is for ResNet-18's batch norm)
                    const std::optional<TrainConfig> c = resumed({option, s.text(saved)});
                    REQUIRE(c);
                    CHECK(s.text(*c) == s.text(saved));
                } catch (const InputError& e) {
                    CHECK_THAT(e.what(), !Catch::Contains("differs"));
                }
            }
        }
        if (s.on_resume != OnResume::decided) {  // not given: the checkpoint's
            const std::optional<TrainConfig> c = resumed({});
            REQUIRE(c);
            CHECK(s.text(*c) == s.text(saved));
        }
    }
    // And the other way: each setting named above is kept.
    for (const auto& entry : other) {
        const std::string_view key = entry.first;  // not a structured binding: Clang 14 captures none
        CHECK(std::ranges::count_if(run_settings(), [&](const RunSetting& s) {
                  return s.key == key && s.on_resume == OnResume::kept;
              }) == 1);
    }
    const std::optional<TrainConfig> more = resumed({"--epochs", "12"});
    REQUIRE(more);
    CHECK(more->epochs == 12);
    std::filesystem::remove(path);
}
