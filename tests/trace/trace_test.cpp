// Trace writer and reader: round trip (plain and gzip), bad input, and a schedule exported as a trace.
#include <gtest/gtest.h>

#include <sstream>

#include "trace/trace.h"
#include "trace/trace_version.h"

namespace memwall::trace {
namespace {

std::string sample_trace(int spans) {
  std::ostringstream out;
  TraceWriter w(out);
  TraceHeader h;
  h.memwall_version = "0.1.0";
  h.executor = "reference";
  h.command = "plan";
  h.ranks = 16;
  h.hardware_json = R"({"name":"dgx2"})";
  w.begin(h);
  w.process_name(0, "rank 0");
  w.thread_name(0, 1, "compute");
  for (int i = 0; i < spans; ++i) {
    TraceSpan s;
    s.tid = 1;
    s.name = "fwd \"L" + std::to_string(i) + "\"";
    s.category = "compute";
    s.ts_us = i * 10.0;
    s.dur_us = 5;
    s.task = i;
    s.phase = "forward";
    s.flops = 1e9;
    w.span(s);
    w.counter({0, "memory gpu", i * 10.0, {{"params16", 1e6 * i}, {"activation_working", 2.5}}});
  }
  EXPECT_TRUE(w.finish().is_ok());
  return out.str();
}

TEST(Trace, RoundTripKeepsEverything) {
  const Result<TraceData> d = read_trace(sample_trace(100));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->format, kFormatName);
  EXPECT_EQ(d->header.ranks, 16);
  EXPECT_EQ(d->header.executor, "reference");
  EXPECT_EQ(d->header.hardware_json, R"({"name":"dgx2"})");
  ASSERT_EQ(d->spans.size(), 100u);
  EXPECT_EQ(d->spans[7].name, "fwd \"L7\"");
  EXPECT_EQ(d->spans[7].ts_us, 70);
  EXPECT_EQ(d->spans[7].flops, 1e9);
  EXPECT_EQ(d->spans[7].phase, "forward");
  ASSERT_EQ(d->counters.size(), 100u);
  ASSERT_EQ(d->counters[3].values.size(), 2u);
  for (const auto& [name, value] : d->counters[3].values)
    EXPECT_EQ(value, name == "params16" ? 3e6 : 2.5) << name;
  EXPECT_EQ((d->threads.at({0, 1})), "compute");
  EXPECT_EQ(d->unknown_events, 0u);
}

TEST(Trace, GzipRoundTrip) {
  const std::string plain = sample_trace(2000);
  std::ostringstream packed;
  {
    GzipOstream gz(packed);
    gz << plain;
    ASSERT_TRUE(gz.close().is_ok());
  }
  EXPECT_LT(packed.str().size(), plain.size() / 4);
  const Result<TraceData> d = read_trace(packed.str());
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->spans.size(), 2000u);
}

TEST(Trace, BadInputIsNamed) {
  const std::string plain = sample_trace(10);
  const Result<TraceData> truncated = read_trace(plain.substr(0, plain.size() / 2));
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_NE(truncated.status().message().find("not valid JSON"), std::string::npos);

  std::ostringstream packed;
  {
    GzipOstream gz(packed);
    gz << plain;
    ASSERT_TRUE(gz.close().is_ok());
  }
  const std::string gz = packed.str();
  const Result<TraceData> cut = read_trace(gz.substr(0, gz.size() / 2));
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();

  const Result<TraceData> foreign = read_trace(R"({"traceEvents": []})");
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_NE(foreign.status().message().find("not a memwall trace"), std::string::npos);

  const Result<TraceData> future =
      read_trace(R"({"otherData": {"format": "memwall-trace", "version": "2.0"}, "traceEvents": []})");
  ASSERT_FALSE(future.is_ok());
  EXPECT_NE(future.status().message().find("2.x"), std::string::npos) << future.status().message();

  // Header fields of another type name their key (a string rank count and a numeric version aborted memwall).
  const Result<TraceData> ranks = read_trace(
      R"({"otherData": {"format": "memwall-trace", "version": "1.1", "ranks": "x"}, "traceEvents": []})");
  ASSERT_FALSE(ranks.is_ok());
  EXPECT_NE(ranks.status().message().find("otherData.ranks is \"x\"; allowed: an integer 1..1048576"),
            std::string::npos)
      << ranks.status().message();
  const Result<TraceData> version =
      read_trace(R"({"otherData": {"format": "memwall-trace", "version": 2}, "traceEvents": []})");
  ASSERT_FALSE(version.is_ok());
  EXPECT_NE(version.status().message().find("otherData.version is 2; allowed: a string"), std::string::npos)
      << version.status().message();
}

TEST(Trace, UnknownEventKindsAreCountedNotFatal) {
  const Result<TraceData> d = read_trace(
      R"({"otherData": {"format": "memwall-trace", "version": "1.3"}, "traceEvents": [{"ph": "i", "name": "x"},
          {"ph": "f", "id": 1}, {"ph": "X", "name": "k", "ts": 1, "dur": 2}]})");
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->unknown_events, 2u);
  EXPECT_EQ(d->spans.size(), 1u);
}

// Ids far outside int (a damaged or hostile file) read as -1 (no task, no track), not as an undefined cast.
TEST(Trace, OutOfRangeIdsReadAsNone) {
  const Result<TraceData> d = read_trace(
      R"({"otherData": {"format": "memwall-trace", "version": "1.3"}, "traceEvents": [{"ph": "X", "name": "k",
          "pid": 1e300, "tid": -1e300, "ts": 1, "dur": 2, "args": {"task": 5e20, "deps": [1e300, 3]}}]})");
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_EQ(d->spans.size(), 1u);
  EXPECT_EQ(d->spans[0].pid, -1);
  EXPECT_EQ(d->spans[0].tid, -1);
  EXPECT_EQ(d->spans[0].task, -1);
}

TEST(Trace, QuotesEveryControlCharacter) {
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01"), "\"a\\\"b\\\\c\\n\\t\\u0001\"");
}

}  // namespace
}  // namespace memwall::trace
