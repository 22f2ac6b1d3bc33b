#include "model/dataset.hpp"

#include <filesystem>

#include "base/errors.hpp"
#include "model/idx.hpp"

namespace dpt {
namespace fs = std::filesystem;

namespace {

constexpr int side = 28, num_classes = 10;
const char* const default_dirs[] = {"data/fashion-mnist", "/usr/share/datasets/fashion-mnist"};

// `dir/stem.gz` if present, else `dir/stem`.
std::string data_file(const std::string& dir, const std::string& stem) {
    const fs::path gz = fs::path(dir) / (stem + ".gz"), plain = fs::path(dir) / stem;
    if (fs::exists(gz)) return gz.string();
    if (fs::exists(plain)) return plain.string();
    throw InputError("data directory " + dir + " has neither " + gz.filename().string() + " nor " +
                     plain.filename().string());
}

}  // namespace

std::string find_data_dir(const std::string& requested) {
    if (!requested.empty()) {
        if (!fs::is_directory(requested)) throw InputError("--data " + requested + ": no such directory");
        return requested;
    }
    for (const char* dir : default_dirs)
        if (fs::is_directory(dir)) return dir;
    throw InputError(
        "Fashion-MNIST not found in data/fashion-mnist/ or /usr/share/datasets/fashion-mnist/; "
        "install it with `apt-get install dataset-fashion-mnist` (or scripts/deps.sh), or pass --data DIR");
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
    // One statement per file, so the first missing one is the one reported.
    const std::string train_images = data_file(dir, "train-images-idx3-ubyte");
    const std::string train_labels = data_file(dir, "train-labels-idx1-ubyte");
    const std::string test_images = data_file(dir, "t10k-images-idx3-ubyte");
    const std::string test_labels = data_file(dir, "t10k-labels-idx1-ubyte");
    f.train = load_split(train_images, train_labels, limit_train);
    f.test = load_split(test_images, test_labels, limit_test);
    return f;
}

}  // namespace dpt
