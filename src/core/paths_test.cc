// core/paths.h: output-versus-input checks, output resolution, regular-file checks and the
// temporary-path registry, on a real temporary directory.
#include "trainscope/core/paths.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "gtest/gtest.h"

namespace trainscope {
namespace {

class PathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::TempDir("paths_test");
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
    old_cwd_ = cwd;
    ASSERT_EQ(::chdir(dir_.c_str()), 0);
  }
  void TearDown() override {
    ASSERT_EQ(::chdir(old_cwd_.c_str()), 0);
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string P(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& text = "x\n") {
    std::ofstream(P(name)) << text;
  }
  static bool Exists(const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0;
  }
  static std::string Message(const absl::Status& s) { return std::string(s.message()); }

  std::string dir_, old_cwd_;
};

// ---- CheckRegularFile

TEST_F(PathsTest, RegularFileAccepted) {
  Write("a.json");
  EXPECT_TRUE(CheckRegularFile(P("a.json")).ok());
  ASSERT_EQ(::symlink("a.json", P("link.json").c_str()), 0);
  EXPECT_TRUE(CheckRegularFile(P("link.json")).ok());  // followed
}

TEST_F(PathsTest, MissingFileIsNotFound) {
  absl::Status s = CheckRegularFile(P("nope.json"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(Message(s).find("nope.json: no such file"), std::string::npos) << s;
}

TEST_F(PathsTest, DirectoryIsInvalidArgument) {
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  absl::Status s = CheckRegularFile(P("d"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(s).find("d is a directory"), std::string::npos) << s;
}

TEST_F(PathsTest, FifoAndDeviceAreRefusedWithoutBlocking) {
  // A FIFO with no writer: opening it would block forever; the check never opens it.
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  absl::Status s = CheckRegularFile(P("fifo"), "the index is read with random access");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(s).find("is not a regular file (a FIFO): the index is read"), std::string::npos)
      << s;
  s = CheckRegularFile("/dev/zero");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(s).find("/dev/zero is not a regular file (a character device)"),
            std::string::npos)
      << s;
}

// ---- ResolveOutputPath

TEST_F(PathsTest, ResolvesSpellingsOfAnExistingFile) {
  Write("in.jsonl");
  ASSERT_EQ(::mkdir(P("sub").c_str(), 0755), 0);
  EXPECT_EQ(*ResolveOutputPath("in.jsonl"), P("in.jsonl"));
  EXPECT_EQ(*ResolveOutputPath("./in.jsonl"), P("in.jsonl"));
  EXPECT_EQ(*ResolveOutputPath("sub/../in.jsonl"), P("in.jsonl"));
  EXPECT_EQ(*ResolveOutputPath(P("sub/.//../in.jsonl")), P("in.jsonl"));
}

TEST_F(PathsTest, ResolvesAnOutputThatDoesNotExistYet) {
  ASSERT_EQ(::mkdir(P("sub").c_str(), 0755), 0);
  EXPECT_EQ(*ResolveOutputPath("./new.jsonl"), P("new.jsonl"));
  EXPECT_EQ(*ResolveOutputPath("sub/new.jsonl"), P("sub/new.jsonl"));
  // Directories that do not exist yet (created by the writer) are normalised lexically.
  EXPECT_EQ(*ResolveOutputPath("a/b/../c/./new.jsonl"), P("a/c/new.jsonl"));
  EXPECT_EQ(*ResolveOutputPath("a/../sub/x"), P("sub/x"));
  // A symlinked directory on the way is resolved.
  ASSERT_EQ(::symlink("sub", P("sublink").c_str()), 0);
  EXPECT_EQ(*ResolveOutputPath("sublink/new.jsonl"), P("sub/new.jsonl"));
}

TEST_F(PathsTest, ResolvesSymlinksToTheirFinalTarget) {
  ASSERT_EQ(::mkdir(P("data").c_str(), 0755), 0);
  Write("data/target.jsonl");
  ASSERT_EQ(::symlink("data/target.jsonl", P("link1").c_str()), 0);
  ASSERT_EQ(::symlink("link1", P("link2").c_str()), 0);
  EXPECT_EQ(*ResolveOutputPath("link2"), P("data/target.jsonl"));
  // A relative link inside another directory is relative to that directory.
  ASSERT_EQ(::symlink("target.jsonl", P("data/rel").c_str()), 0);
  EXPECT_EQ(*ResolveOutputPath("data/rel"), P("data/target.jsonl"));
  // Dangling: the path it points at (written through, creating the target).
  ASSERT_EQ(::symlink("data/later.jsonl", P("dangling").c_str()), 0);
  EXPECT_EQ(*ResolveOutputPath("dangling"), P("data/later.jsonl"));
}

TEST_F(PathsTest, SymlinkLoopIsAnError) {
  ASSERT_EQ(::symlink("loop2", P("loop1").c_str()), 0);
  ASSERT_EQ(::symlink("loop1", P("loop2").c_str()), 0);
  auto r = ResolveOutputPath("loop1");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ResolveOutputPath("").ok());
}

// ---- CheckOutputFile

TEST_F(PathsTest, OutputMustBeARegularFileOrNew) {
  Write("f");
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  EXPECT_TRUE(CheckOutputFile(P("f")).ok());
  EXPECT_TRUE(CheckOutputFile(P("new")).ok());
  absl::Status s = CheckOutputFile(P("d"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(s).find("is a directory"), std::string::npos) << s;
  s = CheckOutputFile("/dev/null");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(s).find("a character device"), std::string::npos) << s;
}

// ---- CheckOutputNotInput

TEST_F(PathsTest, OutputThatIsAnInputIsRefused) {
  Write("a.jsonl");
  Write("b.jsonl");
  const std::vector<std::string> in = {"a.jsonl", "b.jsonl"};
  for (const char* out : {"a.jsonl", "./a.jsonl", "b.jsonl", "./b.jsonl"}) {
    absl::Status s = CheckOutputNotInput({out}, in);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << out;
    EXPECT_NE(Message(s).find(std::string("refusing to write ") + out), std::string::npos) << s;
    EXPECT_NE(Message(s).find("(the same file)"), std::string::npos) << s;
  }
  EXPECT_NE(Message(CheckOutputNotInput({P("b.jsonl")}, in)).find("the input b.jsonl"),
            std::string::npos);
  // An absolute spelling of a relative input, and the other way round.
  EXPECT_FALSE(CheckOutputNotInput({P("a.jsonl")}, in).ok());
  EXPECT_FALSE(CheckOutputNotInput({"a.jsonl"}, {P("a.jsonl")}).ok());
  EXPECT_TRUE(CheckOutputNotInput({"c.jsonl"}, in).ok());
}

TEST_F(PathsTest, HardLinkAndSymlinkOfAnInputAreRefused) {
  Write("in.jsonl");
  ASSERT_EQ(::link(P("in.jsonl").c_str(), P("hard.jsonl").c_str()), 0);
  ASSERT_EQ(::symlink("in.jsonl", P("soft.jsonl").c_str()), 0);
  EXPECT_FALSE(CheckOutputNotInput({"hard.jsonl"}, {"in.jsonl"}).ok());
  EXPECT_FALSE(CheckOutputNotInput({"soft.jsonl"}, {"in.jsonl"}).ok());
  // The input given through the link, the output by its real name.
  EXPECT_FALSE(CheckOutputNotInput({"in.jsonl"}, {"soft.jsonl"}).ok());
}

TEST_F(PathsTest, EveryOutputOfAMultiFileWriterIsCompared) {
  // data pack P.bin -o P writes P.bin and P.idx.
  Write("P.bin");
  Write("P.idx");
  absl::Status s = CheckOutputNotInput({"P.bin", "P.idx"}, {"P.idx", "P.bin"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckOutputNotInput({"Q.bin", "Q.idx"}, {"P.idx", "P.bin"}).ok());
  EXPECT_FALSE(CheckOutputNotInput({"Q.bin", "P.idx"}, {"P.idx", "P.bin"}).ok());
}

TEST_F(PathsTest, OutputInsideAnInputDirectoryIsRefused) {
  ASSERT_EQ(::mkdir(P("corpus").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(P("corpus/sub").c_str(), 0755), 0);
  Write("corpus/x.jsonl");
  const std::vector<std::string> in = {"corpus"};
  // Existing or not, at any depth, whatever the name.
  for (const char* out : {"corpus/x.jsonl", "corpus/new.jsonl", "./corpus/sub/new.txt",
                          "corpus/sub/../y", "corpus/newdir/z.jsonl"}) {
    absl::Status s = CheckOutputNotInput({out}, in);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << out;
    EXPECT_NE(Message(s).find("inside the input directory corpus"), std::string::npos) << s;
  }
  // A sibling whose name starts with the directory's is outside it.
  EXPECT_TRUE(CheckOutputNotInput({"corpus2/x.jsonl"}, in).ok());
  EXPECT_TRUE(CheckOutputNotInput({"corpus.jsonl"}, in).ok());
  EXPECT_TRUE(CheckOutputNotInput({"corpus/../out.jsonl"}, in).ok());
  // Through a symlinked directory.
  ASSERT_EQ(::symlink("corpus", P("alias").c_str()), 0);
  EXPECT_FALSE(CheckOutputNotInput({"alias/new.jsonl"}, in).ok());
  EXPECT_FALSE(CheckOutputNotInput({"corpus/new.jsonl"}, {"alias"}).ok());
}

TEST_F(PathsTest, MissingInputsAreSkipped) {
  EXPECT_TRUE(CheckOutputNotInput({"out.jsonl"}, {"missing.jsonl", "missing_dir"}).ok());
}

// ---- temporary paths

TEST_F(PathsTest, RegisteredPathsAreRemovedAndReleasedOnesKept) {
  ASSERT_EQ(::mkdir(P("spill").c_str(), 0700), 0);
  Write("spill/band0");
  Write("spill/band1");
  Write("out.tmp");
  Write("kept.tmp");
  {
    TempPathRegistration dir(P("spill"), TempPathKind::kPrivateDir);
    TempPathRegistration file(P("out.tmp"), TempPathKind::kFile);
    TempPathRegistration kept(P("kept.tmp"), TempPathKind::kFile);
    EXPECT_TRUE(dir.registered());
    kept.Release();
    EXPECT_FALSE(kept.registered());
    EXPECT_GE(RemoveRegisteredTempPaths(), 2);
  }
  EXPECT_FALSE(Exists(P("spill")));
  EXPECT_FALSE(Exists(P("out.tmp")));
  EXPECT_TRUE(Exists(P("kept.tmp")));
  // Unregistered when destroyed: nothing of ours is registered any more.
  Write("after");
  EXPECT_EQ(RemoveRegisteredTempPaths(), 0);
  EXPECT_TRUE(Exists(P("after")));
}

TEST_F(PathsTest, RegistrationsMoveAndRunOut) {
  TempPathRegistration a(P("a"), TempPathKind::kFile);
  TempPathRegistration b(std::move(a));
  EXPECT_FALSE(a.registered());
  EXPECT_TRUE(b.registered());
  std::vector<TempPathRegistration> many;
  for (int i = 0; i < kMaxTempPaths + 5; ++i) {
    many.emplace_back(P("m" + std::to_string(i)), TempPathKind::kFile);
  }
  int registered = 0;
  for (const auto& r : many) registered += r.registered();
  EXPECT_EQ(registered, kMaxTempPaths - 1);  // `b` holds one slot
  many.clear();
  b.Release();
  EXPECT_EQ(RemoveRegisteredTempPaths(), 0);
}

// The use the registry is for: a process killed by SIGTERM in the middle of its work, whose
// handler (installed by the executable, as src/cli does) removes the registered paths and
// dies of the signal.
void RemoveAndDie(int sig) {
  RemoveRegisteredTempPaths();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

TEST_F(PathsTest, SignalHandlerRemovesRegisteredPaths) {
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string spill = P("spill" + std::to_string(sig));
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::signal(sig, RemoveAndDie);
      ::mkdir(spill.c_str(), 0700);
      TempPathRegistration reg(spill, TempPathKind::kPrivateDir);
      for (int i = 0; i < 300; ++i) {  // more entries than one getdents64 buffer holds
        std::ofstream(spill + "/file" + std::to_string(i)) << "x";
      }
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(10);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    EXPECT_TRUE(Exists(spill));
    ASSERT_EQ(::kill(pid, sig), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status));
    if (WIFSIGNALED(status)) {
      EXPECT_EQ(WTERMSIG(status), sig);
    }
    EXPECT_FALSE(Exists(spill)) << "signal " << sig;
  }
}

}  // namespace
}  // namespace trainscope
