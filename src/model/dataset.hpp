// Fashion-MNIST in memory: the train and test sets as bytes, found and checked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dpt {

struct Dataset {
    std::vector<uint8_t> images;  // (count, rows * cols), pixels 0..255
    std::vector<uint8_t> labels;  // (count), 0..9
    size_t count = 0;
    int rows = 0, cols = 0;
    int pixels() const { return rows * cols; }
};

// One blank sample of Fashion-MNIST's 28x28: devices need a data set to exist, and the
// commands that only move gradients (demo allreduce, bench-allreduce) have none.
inline Dataset blank_dataset(size_t count = 1) {
    Dataset blank;
    blank.images.assign(count * 28 * 28, 0);
    blank.labels.assign(count, 0);
    blank.count = count;
    blank.rows = blank.cols = 28;
    return blank;
}

struct FashionMnist {
    std::string dir;  // where the files were found
    Dataset train, test;
};

// The directory to read from: `requested` when given (it must exist), else
// data/fashion-mnist/, else /usr/share/datasets/fashion-mnist/ (Debian's
// dataset-fashion-mnist). Throws InputError saying where it looked.
std::string find_data_dir(const std::string& requested);

// The four files load_fashion_mnist reads in `dir` (train images, train
// labels, test images, test labels: each .gz or not), checked as inputs
// (base/files.hpp).
std::vector<std::string> data_files(const std::string& dir);
// Reads train-images/labels and t10k-images/labels (.gz or not) from `dir`,
// keeps the first `limit_train` / `limit_test` samples (0: all), checks that
// images are 28x28, labels are 0..9 and the counts agree.
FashionMnist load_fashion_mnist(const std::string& dir, size_t limit_train, size_t limit_test);

// One image/label pair of files; exposed for tests.
Dataset load_split(const std::string& images_path, const std::string& labels_path, size_t limit);

}  // namespace dpt
