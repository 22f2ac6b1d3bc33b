#include "model/dataset.hpp"

#include <filesystem>

#include "base/errors.hpp"
#include "base/files.hpp"
#include "model/idx.hpp"

namespace dpt {
namespace fs = std::filesystem;

namespace {

constexpr int side = 28, num_classes = 10;
const char* const default_dirs[] = {"data/fashion-mnist", "/usr/share/datasets/fashion-mnist"};

// `dir/stem.gz` if present, else `dir/stem`; a regular file that can be
// read (a FIFO there would block the run for ever).
std::string data_file(const std::string& dir, const std::string& stem) {
    const fs::path gz = fs::path(dir) / (stem + ".gz"), plain = fs::path(dir) / stem;
    std::error_code ec;
    for (const fs::path& p : {gz, plain}) {
        if (!fs::exists(fs::symlink_status(p, ec))) continue;
        check_input_file("--data", p.string());
        return p.string();
    }
    throw InputError("data directory " + dir + " has neither " + gz.filename().string() + " nor " +
                     plain.filename().string());
}

}  // namespace

std::string find_data_dir(const std::string& requested) {
    if (!requested.empty()) {
        check_input_dir("--data", requested);
        return requested;
    }
    std::error_code ec;
    for (const char* dir : default_dirs)
        if (fs::is_directory(dir, ec)) {
            check_input_dir("the data directory", dir);
            return dir;
        }
    throw InputError(
        "Fashion-MNIST not found in data/fashion-mnist/ or /usr/share/datasets/fashion-mnist/; "
        "install it with `apt-get install dataset-fashion-mnist` (or scripts/deps.sh), or pass --data DIR");
}

std::vector<std::string> data_files(const std::string& dir) {
    // In this order, so the first missing one is the one reported.
    std::vector<std::string> files;
    for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte"})
        files.push_back(data_file(dir, stem));
    return files;
}

Dataset load_split(const std::string& images_path, const std::string& labels_path, size_t limit) {
    IdxArray images = read_idx(images_path);
    IdxArray labels = read_idx(labels_path);
    if (images.dims.size() != 3 || images.dims[1] != side || images.dims[2] != side)
        throw InputError(images_path + ": expected images of shape (N, 28, 28)");
    if (labels.dims.size() != 1) throw InputError(labels_path + ": expected a 1-D array of labels");
    if (images.dims[0] != labels.dims[0])
        throw InputError(images_path + " holds " + std::to_string(images.dims[0]) + " images but " + labels_path +
                         " holds " + std::to_string(labels.dims[0]) + " labels");
    if (images.dims[0] == 0) throw InputError(images_path + ": holds no images");
    for (size_t i = 0; i < labels.data.size(); ++i)
        if (labels.data[i] >= num_classes)
            throw InputError(labels_path + ": label " + std::to_string(labels.data[i]) + " at index " +
                             std::to_string(i) + " is not a class 0..9");

    Dataset d;
    d.rows = d.cols = side;
    d.count = images.dims[0];
    if (limit > 0 && limit < d.count) d.count = limit;
    images.data.resize(d.count * d.pixels());
    labels.data.resize(d.count);
    d.images = std::move(images.data);
    d.labels = std::move(labels.data);
    return d;
}

FashionMnist load_fashion_mnist(const std::string& dir, size_t limit_train, size_t limit_test) {
    FashionMnist f;
    f.dir = dir;
    const std::vector<std::string> files = data_files(dir);
    const std::string &train_images = files[0], &train_labels = files[1], &test_images = files[2], &test_labels = files[3];
    f.train = load_split(train_images, train_labels, limit_train);
    f.test = load_split(test_images, test_labels, limit_test);
    return f;
}

}  // namespace dpt
