#include "hyperoffload/io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

namespace hyperoffload {

Result<std::string> read_file(const std::filesystem::path& path) {
  if (path == "-") {
    std::ostringstream buffer;
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return make_error(ErrorCode::kIo, fmt::format("cannot read {}: is a directory", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::kIo, fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
  }
  std::string contents;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size > 0) contents.resize(static_cast<std::size_t>(size));
  if (size > 0 && !in.read(contents.data(), size)) {
    return make_error(ErrorCode::kIo, fmt::format("cannot read {}: read failed", path.string()));
  }
  return contents;
}

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  if (path == "-") return make_error(ErrorCode::kIo, "standard input cannot be mapped");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::kIo, fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, fmt::format("cannot map {}: not a regular file", path.string()));
  }
  const auto size = static_cast<std::size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(nullptr, 0);
  }
  // MAP_POPULATE maps every page at once (one call instead of a fault per
  // page); the reader goes through them in order.
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  const int saved = errno;
  ::close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED) {
    return make_error(ErrorCode::kIo, fmt::format("cannot map {}: {}", path.string(), std::strerror(saved)));
  }
  ::madvise(data, size, MADV_SEQUENTIAL);
  return MappedFile(static_cast<const char*>(data), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
}

Result<AtomicFile> AtomicFile::create(const std::filesystem::path& path) {
  if (path == "-") return AtomicFile(path, std::string(), -1);
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  std::string temp_name = ".";
  temp_name += path.filename().string();
  temp_name += ".tmp.XXXXXX";
  std::string temp = (directory / temp_name).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return make_error(ErrorCode::kIo, fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  }
  return AtomicFile(path, std::move(temp), fd);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)), temp_(std::move(other.temp_)), fd_(std::exchange(other.fd_, -1)),
      written_bytes_(std::exchange(other.written_bytes_, 0)) {
  other.temp_.clear();
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
}

Status AtomicFile::fail(const char* what) {
  const int saved = errno;
  discard();
  return make_error(ErrorCode::kIo,
                    fmt::format("cannot write {}: {}: {}", path_.string(), what, std::strerror(saved)));
}

Status AtomicFile::append(std::string_view text) {
  if (path_ == "-") {
    std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!std::cout) return make_error(ErrorCode::kIo, "cannot write to standard output");
    return ok_status();
  }
  if (fd_ < 0) return make_error(ErrorCode::kIo, fmt::format("cannot write {}: already closed", path_.string()));
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t written = ::write(fd_, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      return fail("write failed");
    }
    data += written;
    left -= static_cast<std::size_t>(written);
  }
  // Note [Writeback as the pieces come]
  // commit() fsyncs, and an fsync of a file written whole starts the disk's
  // copy of all of it only then: for the 218 MB schedule of a 1M-op plan, 0.2-0.5 s
  // after the last piece on this machine's disk. Asking the kernel to start
  // writing each piece back as soon as it is in the page cache (without
  // waiting for it) overlaps the disk with the making of the next pieces, so
  // the fsync waits for the last few only: `plan --planner greedy --timings`
  // on the 1M-op chain, the same binary with and without it alternating,
  // five rounds: write 253-292 ms without, 186-295 ms with (the disk's own
  // pace varies more than that from run to run; BENCHMARKS.md). Its result is
  // not checked: where the file system cannot (EINVAL, ESPIPE), nothing is
  // started early and the fsync still reports every error.
  const auto length = static_cast<off_t>(text.size());
  static_cast<void>(::sync_file_range(fd_, written_bytes_, length, SYNC_FILE_RANGE_WRITE));
  written_bytes_ += length;
  return ok_status();
}

Status AtomicFile::commit() && {
  if (path_ == "-") {
    std::cout.flush();
    if (!std::cout) return make_error(ErrorCode::kIo, "cannot write to standard output");
    return ok_status();
  }
  if (fd_ < 0) return make_error(ErrorCode::kIo, fmt::format("cannot write {}: already closed", path_.string()));
  if (::fsync(fd_) != 0) return fail("fsync failed");
  // mkstemp creates the file 0600; give the output the usual umask-based mode.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  if (::close(std::exchange(fd_, -1)) != 0) return fail("close failed");
  if (::rename(temp_.c_str(), path_.c_str()) != 0) return fail("rename failed");
  temp_.clear();  // it is the output now
  return ok_status();
}

Status write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  HO_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  HO_RETURN_IF_ERROR(file.append(contents));
  return std::move(file).commit();
}

}  // namespace hyperoffload
