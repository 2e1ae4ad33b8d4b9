// MNIST in IDX format (gzip-compressed or raw): images as float32 [N,28,28,1] scaled to
// [0,1], labels as int64 [N] in [0,9].
//
//   data::mnist(dir, data::Split::Train)   // dir/train-images-idx3-ubyte[.gz], ...
//   data::mnist(dir, data::Split::Test)    // dir/t10k-images-idx3-ubyte[.gz], ...
//
// Every check failure (missing file, bad magic number, wrong dimensions, truncated or
// corrupt data, image/label count mismatch, label out of range) is a strata::Error that
// names the file and what is wrong.
#pragma once

#include <string>
#include <utility>

#include <strata/data/dataset.h>
#include <strata/data/labeled_arrays.h>

namespace strata::data {

enum class Split { Train, Test };

// The (images, labels) paths for a split in `dir`: tries the usual names with and
// without ".gz" ("train-images-idx3-ubyte", "train-images.idx3-ubyte", ...); throws
// listing the names tried when a file is missing.
std::pair<std::string, std::string> mnist_paths(const std::string& dir, Split split);
// True when `dir` holds either file of the split under one of those names (reading it may
// still fail, naming what is missing or wrong): how a program tells whether the 60,000
// train images are there.
bool has_mnist_split(const std::string& dir, Split split);

// Loads an image file (IDX u8, 3 dims) and a label file (IDX u8, 1 dim) into memory.
LabeledArrays read_mnist_files(const std::string& images_path, const std::string& labels_path);
LabeledArrays read_mnist(const std::string& dir, Split split);

// Datasets of {image [28,28,1] float32, label [] int64} elements.
Dataset mnist_files(const std::string& images_path, const std::string& labels_path);
Dataset mnist(const std::string& dir, Split split);

}  // namespace strata::data
