// Trace format identity: same major accepted, other majors and foreign formats rejected with a hint.
#include <gtest/gtest.h>

#include "trace/trace_version.h"

namespace memwall::trace {
namespace {

TEST(TraceVersion, AcceptsAnyMinorOfItsMajor) {
  EXPECT_TRUE(check_version(kFormatName, format_version()).is_ok());
  EXPECT_TRUE(check_version(kFormatName, std::to_string(kFormatMajor) + ".99").is_ok());
}

TEST(TraceVersion, RejectsOtherMajorsNamingTheNeededVersion) {
  const Status s = check_version(kFormatName, "7.1");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("7.x"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(format_version()), std::string::npos) << s.message();
  EXPECT_FALSE(check_version(kFormatName, "x.1").is_ok());
  EXPECT_FALSE(check_version("chrome-trace", "1.0").is_ok());
}

}  // namespace
}  // namespace memwall::trace
