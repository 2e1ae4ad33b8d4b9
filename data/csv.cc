#include <strata/data/csv.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>

#include <strata/core/error.h>
#include <strata/data/file_io.h>

namespace strata::data {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string_view> split_fields(std::string_view line, char delimiter) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    const size_t end = line.find(delimiter, start);
    fields.push_back(trim(line.substr(start, end == std::string_view::npos ? end : end - start)));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return fields;
}

std::optional<double> parse_number(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

bool all_numeric(const std::vector<std::string_view>& fields) {
  for (auto f : fields) {
    if (!parse_number(f)) return false;
  }
  return true;
}

}  // namespace

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  constexpr const char* op = "csv";
  STRATA_CHECK(options.label_column.empty() || options.label_index < 0, op, ": '", path,
               "': give the label column by name or by index, not both");
  STRATA_CHECK(is_floating(options.dtype), op, ": feature dtype must be floating, got ", options.dtype);
  const auto bytes = read_file_bytes(path, op);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());

  // Non-blank lines with their 1-based line numbers.
  std::vector<std::pair<int64_t, std::string_view>> lines;
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++line_no;
    std::string_view line = text.substr(pos, end - pos);
    if (!trim(line).empty()) lines.emplace_back(line_no, line);
    pos = end + 1;
  }
  STRATA_CHECK(!lines.empty(), op, ": '", path, "' is empty");

  auto first = split_fields(lines[0].second, options.delimiter);
  const bool has_header = options.header == CsvHeader::Present ||
                          (options.header == CsvHeader::Auto && !all_numeric(first));
  const size_t ncols = first.size();
  std::vector<std::string> names;
  for (size_t c = 0; c < ncols; ++c) {
    names.push_back(has_header ? std::string(first[c]) : std::to_string(c));
  }

  int64_t label = -1;
  if (!options.label_column.empty()) {
    STRATA_CHECK(has_header, op, ": '", path, "' has no header line, so label column '",
                 options.label_column, "' cannot be found by name");
    for (size_t c = 0; c < ncols; ++c) {
      if (names[c] == options.label_column) label = int64_t(c);
    }
    STRATA_CHECK(label >= 0, op, ": '", path, "' has no column named '", options.label_column, "'");
  } else if (options.label_index >= 0) {
    STRATA_CHECK(options.label_index < int64_t(ncols), op, ": '", path, "' has ", ncols,
                 " columns; label_index ", options.label_index, " is out of range");
    label = options.label_index;
  }

  const size_t first_data = has_header ? 1 : 0;
  const int64_t rows = int64_t(lines.size() - first_data);
  const int64_t nfeat = int64_t(ncols) - (label >= 0 ? 1 : 0);
  std::vector<double> values;
  values.reserve(size_t(rows * nfeat));
  std::vector<double> label_values;
  for (size_t i = first_data; i < lines.size(); ++i) {
    const auto [ln, line] = lines[i];
    auto fields = split_fields(line, options.delimiter);
    STRATA_CHECK(fields.size() == ncols, op, ": '", path, "' line ", ln, ": expected ", ncols,
                 " fields (as on line ", lines[0].first, "), got ", fields.size());
    for (size_t c = 0; c < ncols; ++c) {
      auto v = parse_number(fields[c]);
      STRATA_CHECK(v.has_value(), op, ": '", path, "' line ", ln, " column ", c + 1, " ('",
                   names[c], "'): '", fields[c], "' is not a number");
      if (int64_t(c) == label) {
        STRATA_CHECK(!is_integral(options.label_dtype) || std::floor(*v) == *v, op, ": '", path,
                     "' line ", ln, ": label '", fields[c], "' is not an integer (label dtype ",
                     options.label_dtype, ")");
        label_values.push_back(*v);
      } else {
        values.push_back(*v);
      }
    }
  }

  CsvTable table;
  for (size_t c = 0; c < ncols; ++c) {
    if (int64_t(c) == label) {
      table.label_name = names[c];
    } else {
      table.column_names.push_back(names[c]);
    }
  }
  table.features = Tensor::from_vector(values, {rows, nfeat}, options.dtype);
  if (label >= 0) table.labels = Tensor::from_vector(label_values, {rows}, options.label_dtype);
  return table;
}

Dataset csv(const std::string& path, const CsvOptions& options) {
  auto table = read_csv(path, options);
  if (table.labels.defined()) return Dataset::from_tensor_slices({table.features, table.labels});
  return Dataset::from_tensor_slices(table.features);
}

}  // namespace strata::data
