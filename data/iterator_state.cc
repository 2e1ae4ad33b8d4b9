#include <strata/data/iterator_state.h>

#include <charconv>
#include <sstream>

#include <strata/core/error.h>

namespace strata::data {

namespace {
constexpr const char* kTextMagic = "sdata1";
// Stage markers live far from small counters so a misaligned read is caught.
constexpr int64_t kStageMarkerBase = 0x53540000;  // "ST"
}  // namespace

std::string IteratorState::to_string() const {
  std::string out = kTextMagic;
  out += ' ';
  out += std::to_string(words.size());
  for (int64_t w : words) {
    out += ' ';
    out += std::to_string(w);
  }
  return out;
}

IteratorState IteratorState::from_string(const std::string& text) {
  std::istringstream is(text);
  std::string magic;
  is >> magic;
  STRATA_CHECK(magic == kTextMagic, "IteratorState::from_string: not a dataset iterator state ",
               "(expected it to start with '", kTextMagic, "', got '", magic.substr(0, 16), "')");
  std::string token;
  auto parse = [&](const char* what) {
    STRATA_CHECK(static_cast<bool>(is >> token), "IteratorState::from_string: state ends early, ",
                 "missing ", what);
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    STRATA_CHECK(ec == std::errc() && ptr == token.data() + token.size(),
                 "IteratorState::from_string: '", token.substr(0, 32), "' is not an int64 (", what,
                 ")");
    return v;
  };
  const int64_t n = parse("word count");
  STRATA_CHECK(n >= 0 && n <= int64_t(text.size()), "IteratorState::from_string: bad word count ", n);
  IteratorState state;
  state.words.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) state.words.push_back(parse("state word"));
  STRATA_CHECK(!(is >> token), "IteratorState::from_string: trailing text after ", n, " words");
  return state;
}

namespace detail {

const char* stage_tag_name(StageTag tag) {
  switch (tag) {
    case StageTag::TensorSlices: return "from_tensor_slices";
    case StageTag::Range: return "range";
    case StageTag::Generator: return "from_generator";
    case StageTag::Map: return "map";
    case StageTag::Filter: return "filter";
    case StageTag::Batch: return "batch";
    case StageTag::Unbatch: return "unbatch";
    case StageTag::Shuffle: return "shuffle";
    case StageTag::Repeat: return "repeat";
    case StageTag::Take: return "take";
    case StageTag::Skip: return "skip";
    case StageTag::Shard: return "shard";
    case StageTag::Zip: return "zip";
    case StageTag::Enumerate: return "enumerate";
    case StageTag::Cache: return "cache";
    case StageTag::Prefetch: return "prefetch";
    case StageTag::BinaryRecords: return "binary_records";
    case StageTag::ReplicaSplit: return "distribute (split between replicas)";
    case StageTag::ReplicaPipelines: return "distribute (one pipeline per replica)";
  }
  return "unknown";
}

void StateWriter::stage(StageTag tag) { words_.push_back(kStageMarkerBase + int64_t(tag)); }

void StateReader::stage(StageTag tag) {
  STRATA_CHECK(pos_ < words_.size(), "Iterator::restore: state does not match this pipeline: ",
               "it ends where stage '", stage_tag_name(tag), "' expected its record");
  const int64_t w = words_[pos_];
  if (w != kStageMarkerBase + int64_t(tag)) {
    // Compared before subtracting: a corrupt word may be anywhere in int64's range.
    if (w >= kStageMarkerBase + int64_t(StageTag::TensorSlices) && w <= kStageMarkerBase + int64_t(StageTag::Last)) {
      const int64_t found = w - kStageMarkerBase;
      fail("Iterator::restore: state does not match this pipeline: stage '", stage_tag_name(tag),
           "' found the record of stage '", stage_tag_name(StageTag(found)), "'");
    }
    fail("Iterator::restore: state does not match this pipeline: stage '", stage_tag_name(tag),
         "' found word ", w, " at position ", pos_, " instead of its marker");
  }
  ++pos_;
}

bool StateReader::next_is(StageTag tag) const {
  return pos_ < words_.size() && words_[pos_] == kStageMarkerBase + int64_t(tag);
}

int64_t StateReader::get(const char* what) {
  STRATA_CHECK(pos_ < words_.size(), "Iterator::restore: state ends early: missing ", what);
  return words_[pos_++];
}

int64_t StateReader::get_in(const char* what, int64_t lo, int64_t hi) {
  const int64_t v = get(what);
  STRATA_CHECK(v >= lo && v <= hi, "Iterator::restore: corrupt state: ", what, " = ", v,
               " outside [", lo, ", ", hi, "]");
  return v;
}

}  // namespace detail
}  // namespace strata::data
