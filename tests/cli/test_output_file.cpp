// Outputs the library writes (coupling/src/output_file.hpp) and the checks of a caller's strided arrays
// (coupling/src/strided_check.hpp): share/docs/reliability.md, "Outputs".
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "output_file.hpp"
#include "strided_check.hpp"
#include "surrogate/error.hpp"

namespace fs = std::filesystem;
using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::detail::check_output_place;
using surrogate::detail::check_strides;
using surrogate::detail::OutputFile;
using surrogate::detail::OutputPlace;

namespace {

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("surrogate_output_file_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static void write(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  /// Temporaries the library left in the test's folder.
  std::vector<std::string> temporaries() const {
    std::vector<std::string> left;
    for (const auto& entry : fs::directory_iterator(dir_))
      if (entry.path().filename().string().rfind(".surrogate-", 0) == 0) left.push_back(entry.path().string());
    return left;
  }
  static std::string message_of(const std::function<void()>& body, ErrorCode expected) {
    try {
      body();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), expected) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
  fs::path dir_;
};

TEST_F(OutputFileTest, WritesAtomicallyWithTheUmasksMode) {
  const std::string out = path("out.bin");
  write(out, "previous");
  const mode_t old_mask = ::umask(027);
  {
    OutputFile file(out, "output file");
    file.write(std::string("new contents"));
    EXPECT_EQ(read(out), "previous") << "the target is replaced only by commit()";
    EXPECT_EQ(temporaries().size(), 1u);
    file.commit();
  }
  ::umask(old_mask);
  EXPECT_EQ(read(out), "new contents");
  struct stat info {};
  ASSERT_EQ(::stat(out.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0640u) << "0666 less the umask 027";
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputFileTest, AnUncommittedOutputLeavesThePreviousFileAndNoTemporary) {
  const std::string out = path("out.bin");
  write(out, "previous");
  {
    OutputFile file(out, "output file");
    file.write(std::string("half"));
  }  // an exception between write and commit unwinds here
  EXPECT_EQ(read(out), "previous");
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputFileTest, PlantedLinksAndUnrelatedFilesAreNotTouched) {
  const std::string victim = path("victim"), out = path("out.bin");
  write(victim, "victim");
  fs::create_symlink(victim, out + ".tmp");  // the old fixed temporary name
  write(path("other.tmp"), "unrelated");
  OutputFile file(out, "output file");
  file.write(std::string("data"));
  file.commit();
  EXPECT_EQ(read(victim), "victim");
  EXPECT_TRUE(fs::is_symlink(out + ".tmp"));
  EXPECT_EQ(read(path("other.tmp")), "unrelated");
  EXPECT_EQ(read(out), "data");
  EXPECT_FALSE(fs::is_symlink(out));
}

TEST_F(OutputFileTest, AnOutputThatIsALinkReplacesTheLinksTarget) {
  fs::create_directories(dir_ / "real");
  const std::string target = path("real/out.bin"), link = path("out.bin");
  write(target, "old");
  fs::create_symlink(target, link);
  OutputFile file(link, "output file");
  file.write(std::string("new"));
  file.commit();
  EXPECT_TRUE(fs::is_symlink(link)) << "the link stays a link";
  EXPECT_EQ(read(target), "new");
  fs::create_symlink(path("nowhere"), path("dangling"));
  const std::string m = message_of([&] { check_output_place(path("dangling"), "--output"); }, ErrorCode::io);
  EXPECT_NE(m.find("symbolic link to a missing"), std::string::npos) << m;
}

TEST_F(OutputFileTest, AFileNameOf252CharactersWorks) {
  const std::string out = path(std::string(249, 'n') + ".h5");
  ASSERT_EQ(fs::path(out).filename().string().size(), 252u);
  OutputFile file(out, "output file");
  file.write(std::string("x"));
  file.commit();
  EXPECT_EQ(read(out), "x");
}

TEST_F(OutputFileTest, AnInputIsNeverAnOutput) {
  const std::string input = path("points.h5");
  write(input, "points");
  fs::create_symlink(input, path("alias.h5"));
  for (const std::string& out : {input, path("alias.h5")}) {
    const std::vector<std::string> inputs = {path("model.h5"), input};
    const std::string m = message_of([&] { check_output_place(out, "--output", inputs); }, ErrorCode::invalid_argument);
    EXPECT_NE(m.find("is the same file as the input '" + input + "'"), std::string::npos) << m;
  }
  EXPECT_EQ(read(input), "points");
}

TEST_F(OutputFileTest, DevicesAndFifosAreWrittenInPlaceOthersAreRefused) {
  EXPECT_EQ(check_output_place("/dev/null", "--output").kind, OutputPlace::Kind::stream);
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(check_output_place(fifo, "--output").kind, OutputPlace::Kind::stream);
  std::string m = message_of([&] { OutputFile file(fifo, "output file"); }, ErrorCode::io);
  EXPECT_NE(m.find("a FIFO with no reader"), std::string::npos) << m;
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the FIFO is not replaced";
  {
    OutputFile null(std::string("/dev/null"), "output file");
    null.write(std::string("discarded"));
    null.commit();
  }
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  m = message_of([&] { check_output_place(dir_.string(), "--output"); }, ErrorCode::io);
  EXPECT_NE(m.find("is a directory"), std::string::npos) << m;
  m = message_of([&] { check_output_place(path("missing/out.h5"), "--output"); }, ErrorCode::io);
  EXPECT_NE(m.find("its directory '" + path("missing") + "' does not exist"), std::string::npos) << m;
  m = message_of([&] { check_output_place("", "--output"); }, ErrorCode::invalid_argument);
  EXPECT_NE(m.find("empty file name"), std::string::npos) << m;
}

TEST_F(OutputFileTest, WriteFailuresNameTheFileAndKeepThePrevious) {
  const std::string out = path("out.bin");
  write(out, "previous");
  ::setenv("SURROGATE_TEST_FAIL_WRITE", "1", 1);
  const std::string m = message_of(
      [&] {
        OutputFile file(out, "output file");
        file.write(std::string("data"));
      },
      ErrorCode::io);
  ::unsetenv("SURROGATE_TEST_FAIL_WRITE");
  EXPECT_NE(m.find("cannot write output file '" + out + "': No space left on device"), std::string::npos) << m;
  EXPECT_EQ(read(out), "previous");
  EXPECT_TRUE(temporaries().empty());
}

TEST(StridedCheck, OverflowingStridesAreRefused) {
  const std::int64_t huge = INT64_MAX / 2;
  EXPECT_NO_THROW(check_strides(10, 3, 3, 1, 8, true, "a"));       // C order
  EXPECT_NO_THROW(check_strides(10, 3, 1, 10, 8, true, "a"));      // Fortran order
  EXPECT_NO_THROW(check_strides(10, 3, -3, 1, 8, true, "a"));      // rows backwards
  EXPECT_NO_THROW(check_strides(1, 1, huge, huge, 8, true, "a"));  // one element: no stride is used
  EXPECT_NO_THROW(check_strides(10, 2, 0, 1, 8, false, "a"));      // an input may repeat its rows
  EXPECT_THROW(check_strides(3, 1, huge, 1, 8, false, "a"), Error);     // 2 * huge * 8 bytes
  EXPECT_THROW(check_strides(2, 2, INT64_MIN, 1, 4, false, "a"), Error);
  EXPECT_THROW(check_strides(2, 2, 1, INT64_MAX, 1, false, "a"), Error);  // 1 + INT64_MAX elements
  try {
    check_strides(5, 2, std::int64_t{1} << 61, 1, 8, false, "predict: input array");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("predict: input array: point stride 2305843009213693952"), std::string::npos)
        << e.what();
  }
}

TEST(StridedCheck, OutputsWhoseElementsShareAnAddressAreRefused) {
  EXPECT_THROW(check_strides(4, 1, 0, 1, 8, true, "out"), Error);  // every point on one element
  EXPECT_THROW(check_strides(4, 2, 1, 1, 8, true, "out"), Error);  // (i, 1) is (i + 1, 0)
  EXPECT_THROW(check_strides(4, 3, 2, 1, 8, true, "out"), Error);  // rows of 3 at a stride of 2
  EXPECT_THROW(check_strides(4, 3, 1, 3, 8, true, "out"), Error);  // columns of 4 at a stride of 3
  EXPECT_THROW(check_strides(4, 2, 0, 0, 8, true, "out"), Error);
  EXPECT_NO_THROW(check_strides(4, 3, 1, 4, 8, true, "out"));
  EXPECT_NO_THROW(check_strides(4, 3, 5, 1, 8, true, "out"));  // padded rows
  EXPECT_NO_THROW(check_strides(4, 3, -3, -1, 8, true, "out"));
  EXPECT_NO_THROW(check_strides(1, 3, 0, 1, 8, true, "out"));  // one point: its stride is never used
  EXPECT_NO_THROW(check_strides(4, 1, 1, 0, 8, true, "out"));  // one channel: likewise
}

}  // namespace
