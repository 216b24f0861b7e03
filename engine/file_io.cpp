#include "engine/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/error.h"
#include "engine/heap.h"

namespace crl {

std::string read_file(const std::string& path, const std::string& cannot_open) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(path, "",
                cannot_open.empty() ? std::string("cannot open file: ") + std::strerror(errno) : cannot_open);
  }
  // Sized once from the file's length, on huge pages from 4 MiB (a model's tokenizer.json is tens of MB:
  // read through a stringstream it was copied at every doubling and once more at the end, and faulted in
  // 4 KiB at a time); a file that is not regular (a pipe, /proc) or that grows meanwhile is read on in
  // 64 KiB steps.
  std::string out;
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    out.reserve(static_cast<size_t>(info.st_size));
    prefer_huge_pages(out.data(), out.capacity());  // (engine/heap.h: from 4 MiB)
    out.resize(static_cast<size_t>(info.st_size));
  }
  size_t size = 0;
  // Past the sized part, through a 64 KiB step buffer: the end of a regular file costs one empty read, not
  // a growth (a copy of the whole buffer).
  std::unique_ptr<char[]> step;
  constexpr size_t kStep = size_t{64} << 10;
  while (true) {
    const bool sized = size < out.size();
    if (!sized && !step) step = std::make_unique<char[]>(kStep);
    const ssize_t got =
        sized ? ::read(fd, out.data() + size, out.size() - size) : ::read(fd, step.get(), kStep);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      throw Error(path, "", std::string("read error: ") + std::strerror(error));
    }
    if (got == 0) break;
    if (sized) {
      size += static_cast<size_t>(got);
    } else {
      out.resize(size);  // (a file that shrank meanwhile: only what was read)
      out.append(step.get(), static_cast<size_t>(got));
      size = out.size();
    }
  }
  ::close(fd);
  out.resize(size);
  return out;
}

std::string read_file(const std::string& path) {
  return read_file(path, "");
}

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw Error(path, "", "cannot create the parent folder: " + ec.message());
  const fs::path temp = target.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path, "", std::string("cannot write file: ") + std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      fs::remove(temp, ec);
      throw Error(path, "", "write failed (disk full?)");
    }
  }
  fs::rename(temp, target, ec);
  if (ec) {
    fs::remove(temp, ec);
    throw Error(path, "", "cannot move the finished file into place: " + ec.message());
  }
}

}  // namespace crl
