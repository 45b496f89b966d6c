// File helpers: the read-only mapping the one-pass trace reader reads, and
// outputs written piece by piece and put in place only when whole.
#include "hyperoffload/io/file.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

std::string contents_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Files in `dir` other than `keep`: the temporary files an output leaves.
int others_in(const std::filesystem::path& dir, const std::filesystem::path& keep) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) count += entry.path() != keep ? 1 : 0;
  return count;
}

// An empty directory `name` in the scratch directory.
std::filesystem::path empty_dir(const std::string& name) {
  const std::filesystem::path dir = scratch_dir() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(AtomicFile, PutsThePiecesInPlaceOnlyWhenCommitted) {
  const std::filesystem::path dir = empty_dir("atomic");
  const std::filesystem::path path = dir / "out.json";
  ASSERT_TRUE(write_file_atomically(path, "old"));
  {
    Result<AtomicFile> file = AtomicFile::create(path);
    ASSERT_TRUE(file) << file.error().message;
    ASSERT_TRUE(file->append("ab"));
    ASSERT_TRUE(file->append(""));
    ASSERT_TRUE(file->append("cd"));
    // Before the commit the output is as it was, and the pieces wait beside it.
    EXPECT_EQ(contents_of(path), "old");
    EXPECT_EQ(others_in(dir, path), 1);
    ASSERT_TRUE(std::move(*file).commit());
  }
  EXPECT_EQ(contents_of(path), "abcd");
  EXPECT_EQ(others_in(dir, path), 0);
}

TEST(AtomicFile, DroppedUncommittedItLeavesTheOutputAndNoTemporaryFile) {
  const std::filesystem::path dir = empty_dir("dropped");
  const std::filesystem::path path = dir / "out.json";
  ASSERT_TRUE(write_file_atomically(path, "old"));
  {
    Result<AtomicFile> file = AtomicFile::create(path);
    ASSERT_TRUE(file);
    ASSERT_TRUE(file->append("half of a new"));
    AtomicFile moved = std::move(*file);  // the moved-from one owns nothing
  }
  EXPECT_EQ(contents_of(path), "old");
  EXPECT_EQ(others_in(dir, path), 0);
  // A directory that does not exist: an error that names the output.
  Result<AtomicFile> missing = AtomicFile::create(dir / "no" / "out.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message,
            "cannot write " + (dir / "no" / "out.json").string() + ": No such file or directory");
}

}  // namespace
}  // namespace hyperoffload
