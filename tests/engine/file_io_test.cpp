// Whole-file reads (engine/file_io.h): sized from the file when it is a regular one, read on in steps when
// it is not (/proc, a pipe) or grows meanwhile; the errors name the path.
#include "engine/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "engine/error.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

TEST(ReadFile, ReadsRegularFilesWholeWhateverTheirSize) {
  test::TempDir dir;
  for (const size_t size : {size_t{0}, size_t{1}, size_t{65535}, size_t{65536}, size_t{5} << 20}) {
    std::string bytes(size, '\0');
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 131 % 251);
    const std::string path = dir.file("f" + std::to_string(size));
    write_file_atomic(path, bytes);
    EXPECT_EQ(read_file(path), bytes) << size;
  }
}

// /proc files say they are empty; a pipe has no size at all.
TEST(ReadFile, ReadsFilesWithoutASizeToTheirEnd) {
  const std::string status = read_file("/proc/self/status");
  EXPECT_NE(status.find("Name:"), std::string::npos) << status;
  test::TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string sent(200'000, 'p');  // more than a pipe's buffer and than one 64 KiB step
  std::thread feeder([&] {
    FILE* out = std::fopen(fifo.c_str(), "w");
    ASSERT_NE(out, nullptr);
    std::fwrite(sent.data(), 1, sent.size(), out);
    std::fclose(out);
  });
  const std::string got = read_file(fifo);
  feeder.join();
  EXPECT_EQ(got, sent);
}

TEST(ReadFile, ErrorsNameThePathAndWhy) {
  test::TempDir dir;
  try {
    read_file(dir.file("missing.json"));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), dir.file("missing.json"));
    EXPECT_EQ(e.message(), "cannot open file: No such file or directory");
  }
  try {
    read_file(dir.file("missing.json"), "cannot open the tokenizer.json (missing or unreadable)");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "cannot open the tokenizer.json (missing or unreadable)");
  }
  try {
    read_file(dir.path().string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), dir.path().string());
    EXPECT_EQ(e.message(), "read error: Is a directory");
  }
}

}  // namespace
}  // namespace crl
