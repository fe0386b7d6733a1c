// Hostile JSONL traces (issue 19): a line nested tens of thousands deep or a huge bad value is
// one short error naming file:line and the field, never a crash in a recursion.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "engine/trace.h"
#include "test_util.h"

namespace loom {
namespace {

std::string write_trace(const std::string& name, const std::string& text) {
  const std::string p = test::temp_dir() + "/" + name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string error_of(const std::string& path) {
  try {
    read_trace(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TraceHostile, DeepAndHugeValuesAreOneShortLine) {
  const std::string ok = "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n";
  const std::string deep = std::string(52000, '[') + "1" + std::string(52000, ']');
  const std::string p = write_trace("deep.jsonl", ok + "{\"timestamp\": 1, \"hash_ids\": " + deep + "}\n");
  const std::string e = error_of(p);
  EXPECT_NE(e.find(p + ":2:"), std::string::npos) << e.substr(0, 300);
  EXPECT_NE(e.find("nested more than 8 levels deep"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 400u);
  // Within the depth limit, a long bad value is quoted capped.
  std::string wide = "[";
  for (int i = 0; i < 100000; ++i) wide += i ? ",[1]" : "[1]";
  wide += "]";
  const std::string p2 = write_trace("wide.jsonl", "{\"timestamp\": 0, \"input_length\": " + wide + "}\n");
  const std::string e2 = error_of(p2);
  EXPECT_NE(e2.find("input_length"), std::string::npos) << e2.substr(0, 300);
  EXPECT_LT(e2.size(), 400u) << e2.substr(0, 600);
}

}  // namespace
}  // namespace loom
