// Formatting and parsing of sizes, and Status/Result basics.
#include <gtest/gtest.h>

#include "base/status.h"
#include "base/units.h"

namespace memwall {
namespace {

TEST(Units, FormatBytesUsesBinaryPrefixes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(32.0 * kGiB), "32.00 GiB");
  EXPECT_EQ(format_bytes(1.83 * kTiB), "1.83 TiB");
}

TEST(Units, ParseBytesAcceptsBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_bytes("2GiB").bytes, 2 * kGiB);
  EXPECT_EQ(parse_bytes("2g").bytes, 2 * kGiB);
  EXPECT_EQ(parse_bytes("1.5GB").bytes, 1.5e9);
  EXPECT_EQ(parse_bytes("1e9").bytes, 1e9);
  EXPECT_EQ(parse_bytes("4096").bytes, 4096);
  EXPECT_FALSE(parse_bytes("two").ok);
  EXPECT_FALSE(parse_bytes("2 parsecs").ok);
  EXPECT_FALSE(parse_bytes("-1").ok);
}

TEST(StatusTest, ResultCarriesValueOrError) {
  Result<int> ok = 3;
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, 3);
  Result<int> bad = Status::invalid_argument("x.json: key 'a': bad");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().to_string(), "invalid argument: x.json: key 'a': bad");
  Result<int> wrong = Status::ok();  // constructing from ok is a bug, reported as internal
  EXPECT_EQ(wrong.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace memwall
