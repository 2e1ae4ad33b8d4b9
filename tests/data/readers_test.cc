// Readers: MNIST IDX (gzip or raw), CSV, fixed-size binary records, the synthetic set.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <strata/data/binary_records.h>
#include <strata/data/csv.h>
#include <strata/data/file_io.h>
#include <strata/data/idx.h>
#include <strata/data/mnist.h>
#include <strata/data/synthetic.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using data::Dataset;
using testing::TempDir;
using testing::write_bytes;
using testing::write_text;

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

// An IDX file: magic 0x0000TTDD, the dims, then `payload`.
std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out{0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims) put_u32(out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& raw) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, uLong(raw.size())) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = uInt(raw.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// n images of h x w whose pixel (i, k) is (i * 31 + k) % 256, labels i % 10.
struct FakeMnist {
  std::vector<uint8_t> images, labels;
};
FakeMnist fake_mnist(uint32_t n, uint32_t h = 28, uint32_t w = 28) {
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t k = 0; k < h * w; ++k) pixels.push_back(uint8_t((i * 31 + k) % 256));
    labels.push_back(uint8_t(i % 10));
  }
  return {idx_bytes(0x08, {n, h, w}, pixels), idx_bytes(0x08, {n}, labels)};
}

// Loading `images` + `labels` throws an error naming `file` and containing `what`.
void expect_mnist_error(const std::string& images, const std::string& labels,
                        const std::string& file, const std::string& what) {
  INFO("images " << images << ", labels " << labels);
  CHECK_THROWS_WITH(data::read_mnist_files(images, labels),
                    Catch::Contains(file) && Catch::Contains(what));
  CHECK_THROWS_AS(data::mnist_files(images, labels), strata::Error);
}

}  // namespace

TEST_CASE("MNIST IDX files load, gzip-compressed or raw", "[data][mnist]") {
  TempDir dir;
  auto fake = fake_mnist(5);
  write_bytes(dir.file("t10k-images-idx3-ubyte"), fake.images);
  write_bytes(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(fake.labels));
  auto arrays = data::read_mnist(dir.path.string(), data::Split::Test);
  CHECK(arrays.features.shape() == Shape{5, 28, 28, 1});
  CHECK(arrays.features.dtype() == kFloat32);
  CHECK(arrays.labels.shape() == Shape{5});
  CHECK(arrays.labels.dtype() == kInt64);
  CHECK(arrays.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  auto px = arrays.features.to_vector<float>();
  CHECK(px[0] == 0.0f);
  CHECK(px[784 * 2 + 5] == Approx(float((2 * 31 + 5) % 256) / 255.0f));
  CHECK(*std::max_element(px.begin(), px.end()) == 1.0f);

  auto ds = data::mnist(dir.path.string(), data::Split::Test);
  CHECK(ds.cardinality() == 5);
  auto batch = *ds.batch(4).make_iterator().next();
  CHECK(batch[0].shape() == Shape{4, 28, 28, 1});
  CHECK(batch[1].shape() == Shape{4});

  // Record ranges: the first 3 and the last 2.
  CHECK(arrays.slice(0, 3).size() == 3);
  CHECK(testing::ints(arrays.slice(3, 5).dataset(), 1) == std::vector<int64_t>{3, 4});
  CHECK_THROWS_WITH(arrays.slice(3, 6), Catch::Contains("outside [0, 5)"));

  // The train split is absent here: the error lists what it looked for.
  CHECK_THROWS_WITH(data::mnist(dir.path.string(), data::Split::Train),
                    Catch::Contains("train-images-idx3-ubyte.gz") && Catch::Contains("no MNIST file"));
}

TEST_CASE("corrupt and truncated MNIST files are errors naming the file and the fault", "[data][mnist]") {
  TempDir dir;
  auto fake = fake_mnist(4);
  const auto images = dir.file("images"), labels = dir.file("labels");
  write_bytes(labels, fake.labels);

  // Bad magic number.
  auto bad = fake.images;
  bad[0] = 0x12;
  write_bytes(images, bad);
  expect_mnist_error(images, labels, images, "bad magic number");
  bad = fake.images;
  bad[2] = 0x07;  // not an IDX type
  write_bytes(images, bad);
  expect_mnist_error(images, labels, images, "bad magic number");

  // Wrong kind of IDX file (a label file given as images, and the other way round).
  write_bytes(images, fake.labels);
  expect_mnist_error(images, labels, images, "not an MNIST image file");
  write_bytes(images, fake.images);
  expect_mnist_error(images, images, images, "not an MNIST label file");

  // Truncated: inside the header, and inside the pixels.
  write_bytes(images, std::vector<uint8_t>(fake.images.begin(), fake.images.begin() + 2));
  expect_mnist_error(images, labels, images, "truncated");
  write_bytes(images, std::vector<uint8_t>(fake.images.begin(), fake.images.begin() + 10));
  expect_mnist_error(images, labels, images, "truncated");
  write_bytes(images, std::vector<uint8_t>(fake.images.begin(), fake.images.end() - 100));
  expect_mnist_error(images, labels, images, "truncated");
  // Trailing bytes beyond what the dimensions say.
  auto longer = fake.images;
  longer.push_back(0);
  write_bytes(images, longer);
  expect_mnist_error(images, labels, images, "1 bytes more");

  // Truncated and corrupt gzip streams.
  const auto gz = gzip(fake.images);
  write_bytes(images, std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
  expect_mnist_error(images, labels, images, "truncated");
  write_bytes(images, std::vector<uint8_t>(gz.begin(), gz.end() - 4));  // trailer cut
  expect_mnist_error(images, labels, images, "truncated");
  auto flipped = gz;
  for (size_t i = 12; i < flipped.size() - 8; i += 7) flipped[i] ^= 0x5a;
  write_bytes(images, flipped);
  expect_mnist_error(images, labels, images, "corrupt");
  auto crc = gz;
  crc[crc.size() - 6] ^= 0xff;  // CRC32 in the trailer
  write_bytes(images, crc);
  expect_mnist_error(images, labels, images, "corrupt");

  // Consistent files that disagree, or hold an impossible label.
  write_bytes(images, fake_mnist(3).images);
  expect_mnist_error(images, labels, labels, "holds 3 images");
  write_bytes(images, fake.images);
  auto bad_labels = fake.labels;
  bad_labels[bad_labels.size() - 1] = 12;
  write_bytes(labels, bad_labels);
  expect_mnist_error(images, labels, labels, "label 12 of record 3 outside [0, 9]");

  // Missing file.
  expect_mnist_error(dir.file("nope"), labels, dir.file("nope"), "cannot open");
}

TEST_CASE("the real MNIST test set", "[data][mnist]") {
  const auto shared = testing::shared_dir();
  const auto dir = shared / "data" / "mnist";
  if (shared.empty() || !std::filesystem::exists(dir / "t10k-images-idx3-ubyte.gz")) {
    WARN("skipped: no MNIST files in " << dir.string());
    return;
  }
  auto arrays = data::read_mnist(dir.string(), data::Split::Test);
  REQUIRE(arrays.size() == 10000);
  CHECK(arrays.features.shape() == Shape{10000, 28, 28, 1});
  std::map<int64_t, int64_t> counts;
  for (int64_t l : arrays.labels.to_vector<int64_t>()) ++counts[l];
  const std::map<int64_t, int64_t> expected{{0, 980}, {1, 1135}, {2, 1032}, {3, 1010}, {4, 982},
                                            {5, 892}, {6, 958},  {7, 1028}, {8, 974},  {9, 1009}};
  CHECK(counts == expected);
  const auto px = arrays.features.to_vector<float>();
  const auto [lo, hi] = std::minmax_element(px.begin(), px.end());
  CHECK(*lo == 0.0f);
  CHECK(*hi == 1.0f);
  double mean = 0;
  for (float v : px) mean += v;
  mean /= double(px.size());
  CHECK(mean == Approx(0.1325).epsilon(0.02));  // MNIST's well-known pixel mean

  // The main program's split of these files.
  auto ds = data::mnist(dir.string(), data::Split::Test);
  CHECK(ds.take(8000).cardinality() == 8000);
  CHECK(ds.skip(8000).cardinality() == 2000);
  CHECK(testing::ints(ds.skip(8000).batch(500), 1).size() == 2000);
}

TEST_CASE("CSV files with and without header and label column", "[data][csv]") {
  TempDir dir;
  const auto path = dir.file("iris.csv");
  write_text(path, "a, b ,\"c\",label\r\n1,2,3,0\r\n\r\n4.5,-5,6e1,2\n+7,8,9,1\n");
  data::CsvOptions opts;
  opts.label_column = "label";
  auto table = data::read_csv(path, opts);
  CHECK(table.column_names == std::vector<std::string>{"a", "b", "c"});
  CHECK(table.label_name == "label");
  CHECK(table.features.shape() == Shape{3, 3});
  CHECK(table.features.to_vector<float>() == std::vector<float>{1, 2, 3, 4.5, -5, 60, 7, 8, 9});
  CHECK(table.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 1});
  auto ds = data::csv(path, opts);
  CHECK(ds.cardinality() == 3);
  auto e = *ds.make_iterator().next();
  CHECK(e[0].shape() == Shape{3});
  CHECK(e[1].item<int64_t>() == 0);

  data::CsvOptions by_index;
  by_index.label_index = 0;
  by_index.header = data::CsvHeader::Present;
  by_index.label_dtype = kFloat32;  // a holds 4.5
  auto t2 = data::read_csv(path, by_index);
  CHECK(t2.label_name == "a");
  CHECK(t2.column_names == std::vector<std::string>{"b", "c", "label"});
  CHECK(t2.labels.to_vector<float>() == std::vector<float>{1, 4.5, 7});
  by_index.label_dtype = kInt64;
  by_index.label_index = 1;  // b holds -5: an integer, fine
  CHECK(data::read_csv(path, by_index).labels.to_vector<int64_t>() == std::vector<int64_t>{2, -5, 8});

  // No header: every line is data, columns are named by position.
  const auto plain = dir.file("plain.csv");
  write_text(plain, "1;2\n3;4\n");
  data::CsvOptions semi;
  semi.delimiter = ';';
  auto t3 = data::read_csv(plain, semi);
  CHECK(t3.column_names == std::vector<std::string>{"0", "1"});
  CHECK(t3.features.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK_FALSE(t3.labels.defined());
  semi.header = data::CsvHeader::Present;
  CHECK(data::read_csv(plain, semi).features.shape() == Shape{1, 2});

  // Errors name the file, the line and the column.
  const auto ragged = dir.file("ragged.csv");
  write_text(ragged, "x,y\n1,2\n3\n");
  CHECK_THROWS_WITH(data::read_csv(ragged), Catch::Contains(ragged) && Catch::Contains("line 3") &&
                                                Catch::Contains("expected 2 fields"));
  const auto text = dir.file("text.csv");
  write_text(text, "x,y\n1,2\n3,abc\n");
  CHECK_THROWS_WITH(data::read_csv(text), Catch::Contains("line 3 column 2 ('y'): 'abc' is not a number"));
  const auto frac = dir.file("frac.csv");
  write_text(frac, "x,y\n1,2.5\n");
  data::CsvOptions ylabel;
  ylabel.label_column = "y";
  CHECK_THROWS_WITH(data::read_csv(frac, ylabel), Catch::Contains("label '2.5' is not an integer"));
  ylabel.label_column = "z";
  CHECK_THROWS_WITH(data::read_csv(frac, ylabel), Catch::Contains("no column named 'z'"));
  write_text(dir.file("empty.csv"), "\n\n");
  CHECK_THROWS_WITH(data::read_csv(dir.file("empty.csv")), Catch::Contains("is empty"));
  CHECK_THROWS_WITH(data::read_csv(dir.file("missing.csv")), Catch::Contains("cannot open"));
}

TEST_CASE("fixed-size binary records", "[data][binary]") {
  TempDir dir;
  // Record: u8 label, then two little-endian int16 values; files have a 3-byte header.
  auto write_file = [&](const std::string& name, int first, int count) {
    std::vector<uint8_t> bytes{'H', 'D', 'R'};
    for (int r = first; r < first + count; ++r) {
      bytes.push_back(uint8_t(r));
      for (int16_t v : {int16_t(-r), int16_t(1000 + r)}) {
        uint16_t u = uint16_t(v);
        bytes.push_back(uint8_t(u & 0xff));
        bytes.push_back(uint8_t(u >> 8));
      }
    }
    write_bytes(dir.file(name), bytes);
    return dir.file(name);
  };
  const auto f1 = write_file("a.bin", 0, 4), f2 = write_file("b.bin", 4, 3), f3 = write_file("c.bin", 7, 0);
  data::BinaryRecordSpec spec;
  spec.header_bytes = 3;
  spec.fields = {{data::RecordType::UInt8, {}, kInt64, 1.0},
                 {data::RecordType::Int16, {2}, kFloat32, 0.5}};
  CHECK(spec.record_bytes() == 5);
  auto ds = data::binary_records({f1, f2, f3}, spec);
  CHECK(ds.cardinality() == 7);
  CHECK(testing::ints(ds, 0) == testing::iota(0, 7));
  std::vector<float> values;
  for (auto& e : ds) {
    CHECK(e[1].shape() == Shape{2});
    for (float v : e[1].to_vector<float>()) values.push_back(v);
  }
  CHECK(values[2] == -0.5f);
  CHECK(values[3] == 500.5f);

  // Resuming across files.
  for (int64_t k = 0; k <= 7; ++k) {
    auto it = ds.make_iterator();
    testing::take_n(it, k);
    auto state = it.save();
    auto rest = testing::drain(it);
    auto it2 = data::binary_records({f1, f2, f3}, spec).make_iterator();
    it2.restore(state);
    CHECK(testing::drain(it2) == rest);
  }

  // File-based auto-sharding splits the file list.
  auto s0 = testing::ints(ds.auto_shard(2, 0, data::AutoShardPolicy::File));
  auto s1 = testing::ints(ds.auto_shard(2, 1, data::AutoShardPolicy::File));
  CHECK(s0 == std::vector<int64_t>{0, 1, 2, 3});  // a.bin, c.bin
  CHECK(s1 == std::vector<int64_t>{4, 5, 6});     // b.bin
  CHECK(testing::ints(ds.batch(2).auto_shard(2, 1, data::AutoShardPolicy::Auto)) ==
        std::vector<int64_t>{4, 5, 6});
  CHECK_THROWS_WITH(ds.auto_shard(4, 0, data::AutoShardPolicy::File), Catch::Contains("at least 4 files"));
  // Auto falls back to Data when there are fewer files than workers.
  CHECK(testing::ints(ds.auto_shard(4, 1, data::AutoShardPolicy::Auto)) == std::vector<int64_t>{1, 5});

  // A file that is not a whole number of records.
  auto bytes = data::read_file_bytes(f1, "test");
  bytes.pop_back();
  write_bytes(dir.file("short.bin"), bytes);
  CHECK_THROWS_WITH(data::binary_records({dir.file("short.bin")}, spec),
                    Catch::Contains("short.bin") && Catch::Contains("4 bytes left over"));
  CHECK_THROWS_WITH(data::binary_records({dir.file("none.bin")}, spec), Catch::Contains("none.bin"));
  CHECK_THROWS_WITH(data::binary_records({f1}, data::BinaryRecordSpec{}), Catch::Contains("no fields"));
}

TEST_CASE("the synthetic classification set is deterministic and learnable", "[data][synthetic]") {
  data::SyntheticOptions opts;
  opts.num_examples = 2000;
  opts.seed = 7;
  auto a = data::make_synthetic_classification(opts);
  CHECK(a.features.shape() == Shape{2000, 784});
  CHECK(a.labels.shape() == Shape{2000});
  auto b = data::make_synthetic_classification(opts);
  CHECK(a.features.to_vector<float>() == b.features.to_vector<float>());
  CHECK(a.labels.to_vector<int64_t>() == b.labels.to_vector<int64_t>());
  opts.seed = 8;
  CHECK(data::make_synthetic_classification(opts).features.to_vector<float>() != a.features.to_vector<float>());

  // A prefix of a larger set is the smaller set.
  opts.seed = 7;
  opts.num_examples = 500;
  auto prefix = data::make_synthetic_classification(opts);
  auto af = a.features.to_vector<float>();
  CHECK(prefix.features.to_vector<float>() == std::vector<float>(af.begin(), af.begin() + 500 * 784));

  // Every class appears, in roughly equal numbers.
  const auto labels = a.labels.to_vector<int64_t>();
  std::map<int64_t, int> counts;
  for (int64_t l : labels) ++counts[l];
  REQUIRE(counts.size() == 10);
  for (auto [c, n] : counts) {
    CHECK(c >= 0);
    CHECK(c < 10);
    CHECK(n > 120);
    CHECK(n < 280);
  }

  // Learnable: nearest class mean, fitted on the first half, classifies the second half.
  const int64_t dim = 784, half = 1000;
  std::vector<double> means(10 * dim, 0.0);
  std::vector<int> n(10, 0);
  for (int64_t i = 0; i < half; ++i) {
    ++n[labels[i]];
    for (int64_t d = 0; d < dim; ++d) means[labels[i] * dim + d] += af[i * dim + d];
  }
  for (int c = 0; c < 10; ++c) {
    for (int64_t d = 0; d < dim; ++d) means[c * dim + d] /= n[c];
  }
  int correct = 0;
  for (int64_t i = half; i < 2000; ++i) {
    int best = 0;
    double best_dist = 1e300;
    for (int c = 0; c < 10; ++c) {
      double dist = 0;
      for (int64_t d = 0; d < dim; ++d) {
        const double diff = af[i * dim + d] - means[c * dim + d];
        dist += diff * diff;
      }
      if (dist < best_dist) best_dist = dist, best = c;
    }
    correct += best == labels[i];
  }
  CHECK(correct > 900);   // learnable...
  CHECK(correct < 1000);  // ...but the classes overlap a little

  // The image variant for the CNN.
  data::SyntheticOptions img;
  img.num_examples = 10;
  img.feature_shape = data::kSyntheticImageShape;
  auto ds = data::synthetic_classification(img);
  auto e = *ds.make_iterator().next();
  CHECK(e[0].shape() == Shape{28, 28, 1});
  CHECK(e[1].dtype() == kInt64);
  CHECK_THROWS_WITH(data::make_synthetic_classification({.num_examples = 5, .num_classes = 1}),
                    Catch::Contains("num_classes must be >= 2"));
}
