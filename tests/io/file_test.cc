// File helpers: the read-only mapping the one-pass trace reader reads.
#include "hyperoffload/io/file.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace hyperoffload {
namespace {

std::filesystem::path scratch_dir() {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "hyperoffload_file_test";
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(MappedFile, HoldsTheFilesBytes) {
  const std::filesystem::path path = scratch_dir() / "bytes.txt";
  ASSERT_TRUE(write_file_atomically(path, std::string_view("abc\0def", 7)));
  Result<MappedFile> mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped) << mapped.error().message;
  EXPECT_EQ(mapped->text(), std::string_view("abc\0def", 7));
  MappedFile moved = std::move(*mapped);
  EXPECT_EQ(moved.text().size(), 7u);
  EXPECT_TRUE(mapped->text().empty());
}

TEST(MappedFile, MapsAnEmptyFileAsEmptyText) {
  const std::filesystem::path path = scratch_dir() / "empty.txt";
  ASSERT_TRUE(write_file_atomically(path, ""));
  Result<MappedFile> mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped) << mapped.error().message;
  EXPECT_TRUE(mapped->text().empty());
}

TEST(MappedFile, FailsForWhatIsNotARegularFile) {
  EXPECT_FALSE(MappedFile::open("-"));
  EXPECT_FALSE(MappedFile::open(scratch_dir()));
  EXPECT_FALSE(MappedFile::open(scratch_dir() / "missing.txt"));
}

}  // namespace
}  // namespace hyperoffload
