// CSV files of numeric columns.
//
//   data::CsvOptions opts;
//   opts.label_column = "species";          // or opts.label_index = 4
//   auto ds = data::csv("iris.csv", opts);  // elements {features [4] float32, label [] int64}
//
// Lines are split on `delimiter`; surrounding spaces and double quotes are stripped; blank
// lines are skipped; "\r\n" endings are accepted. A field that is not a number, or a row
// with a different number of fields, is a strata::Error naming the file, line and column.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/data/dataset.h>

namespace strata::data {

enum class CsvHeader {
  Auto,     // the first line is a header when any of its fields is not a number
  Present,  // the first line is a header
  Absent,   // every line is data; columns are named "0", "1", ...
};

struct CsvOptions {
  char delimiter = ',';
  CsvHeader header = CsvHeader::Auto;
  DType dtype = kFloat32;  // of the feature values
  // The label column, by header name or by index (at most one of the two); it becomes
  // the second component, cast to label_dtype (integral values required for ints).
  std::string label_column;
  int64_t label_index = -1;
  DType label_dtype = kInt64;
};

struct CsvTable {
  std::vector<std::string> column_names;  // feature columns (the label column excluded)
  std::string label_name;                 // empty without a label column
  Tensor features;                        // [rows, columns] of options.dtype
  Tensor labels;                          // [rows] of options.label_dtype, or undefined
};

CsvTable read_csv(const std::string& path, const CsvOptions& options = {});
// from_tensor_slices over read_csv: {features [C]} or {features [C], label []}.
Dataset csv(const std::string& path, const CsvOptions& options = {});

}  // namespace strata::data
