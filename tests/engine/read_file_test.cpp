// Whole-file and ranged reads: contents, a missing file, a directory, a file shorter than the range asked
// for.
#include "engine/io/read_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace memwall::io {
namespace {

TEST(ReadFile, WholeFilesAndRanges) {
  const std::string dir = ::testing::TempDir() + "read-file-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string text(100000, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7 % 251);
  std::ofstream(dir + "/f.bin", std::ios::binary) << text;
  auto whole = read_file(dir + "/f.bin");
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(*whole, text);
  auto missing = read_file(dir + "/none");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir + "/none: cannot open"), std::string::npos);
  auto directory = read_file(dir);
  ASSERT_FALSE(directory.is_ok());
  EXPECT_NE(directory.status().message().find("is a directory"), std::string::npos);

  const int fd = ::open((dir + "/f.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char part[10];
  ASSERT_TRUE(pread_full(fd, part, sizeof part, 5000, "f.bin").is_ok());
  EXPECT_EQ(std::string(part, sizeof part), text.substr(5000, sizeof part));
  const Status past = pread_full(fd, part, sizeof part, text.size() - 4, "f.bin");
  ASSERT_FALSE(past.is_ok());
  EXPECT_NE(past.message().find("f.bin: ends early (truncated at byte 100000)"), std::string::npos)
      << past.message();
  ::close(fd);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memwall::io
