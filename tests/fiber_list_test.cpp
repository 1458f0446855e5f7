// weft::FiberList (WEFT_FIBERS): the parser, its globs and its messages for
// bad entries, the mode decision, and, in child processes, the environment
// path itself (read once per process).
#include <gtest/gtest.h>
#include <unistd.h>
#include <weft/weft.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "pool_support.h"

namespace weft {
namespace {

// One `name:<glob>` entry's verdict on `text`.
bool glob_lists(const std::string& glob, std::string_view text) { return FiberList::parse("name:" + glob).lists(text); }

TEST(FiberList, GlobsAreFnmatchPatterns) {
  EXPECT_TRUE(glob_lists("rpc-*", "rpc-handler"));
  EXPECT_TRUE(glob_lists("rpc-*", "rpc-"));
  EXPECT_FALSE(glob_lists("rpc-*", "rpc"));
  EXPECT_FALSE(glob_lists("rpc-*", "xrpc-1"));
  EXPECT_TRUE(glob_lists("db?", "db1"));
  EXPECT_FALSE(glob_lists("db?", "db"));
  EXPECT_FALSE(glob_lists("db?", "db12"));
  EXPECT_TRUE(glob_lists("*Handler*", "DubboServerHandler-3"));
  EXPECT_FALSE(glob_lists("*Handler*", "DubboServerhandler-3"));  // case matters, as in Wisp
  EXPECT_TRUE(glob_lists("a*b*c", "a-x-b-y-b-c"));
  EXPECT_FALSE(glob_lists("a*b*c", "a-x-b-y-b-"));
  EXPECT_TRUE(glob_lists("*", ""));
  EXPECT_TRUE(glob_lists("exact", "exact"));
  EXPECT_FALSE(glob_lists("exact", "exactly"));
  EXPECT_TRUE(glob_lists("**?", "a"));
  // Names are not paths: `*` and `?` take '/' and a leading '.'.
  EXPECT_TRUE(glob_lists("rpc*", "rpc/eu-1"));
  EXPECT_TRUE(glob_lists("?hidden", ".hidden"));
  // Sets, ranges, negation and escapes, as fnmatch(3) reads them.
  EXPECT_TRUE(glob_lists("db[12]", "db2"));
  EXPECT_FALSE(glob_lists("db[12]", "db3"));
  EXPECT_TRUE(glob_lists("worker-[0-9]", "worker-7"));
  EXPECT_FALSE(glob_lists("worker-[!0-9]", "worker-7"));
  EXPECT_TRUE(glob_lists("a\\*", "a*"));
  EXPECT_FALSE(glob_lists("a\\*", "ab"));
  // No exponential backtracking: this returns at once.
  EXPECT_FALSE(glob_lists("*a*a*a*a*a*a*a*a*a*b", std::string(200, 'a')));
}

TEST(FiberList, ParsesWispStyleEntries) {
  const FiberList list = FiberList::parse("name:rpc-*;name:DubboServerHandler*");
  EXPECT_EQ(list.globs(), (std::vector<std::string>{"rpc-*", "DubboServerHandler*"}));
  EXPECT_TRUE(list.lists("rpc-handler"));
  EXPECT_TRUE(list.lists("DubboServerHandler-1"));
  EXPECT_FALSE(list.lists("db-worker"));
}

TEST(FiberList, BlanksAndEmptyEntriesAreIgnored) {
  const FiberList list = FiberList::parse("  name:a* ;; ; name: b? ;");
  EXPECT_EQ(list.globs(), (std::vector<std::string>{"a*", "b?"}));
  EXPECT_TRUE(FiberList::parse("").empty());
  EXPECT_TRUE(FiberList::parse(" ; ").empty());
  EXPECT_FALSE(FiberList().lists("anything"));
}

TEST(FiberList, StarAloneListsEverything) {
  EXPECT_TRUE(FiberList::parse("*").lists("anything"));
  EXPECT_TRUE(FiberList::parse("name:*").lists("x"));
}

void expect_rejected(const std::string& spec, const std::string& entry, const std::string& why) {
  try {
    FiberList::parse(spec);
    ADD_FAILURE() << "accepted " << spec;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("WEFT_FIBERS entry '" + entry + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
    EXPECT_NE(message.find("name:<glob>"), std::string::npos) << message;
  }
}

TEST(FiberList, BadEntriesAreNamedInTheMessage) {
  expect_rejected("name:ok;rpc-*", "rpc-*", "missing 'name:'");
  expect_rejected("class:com.foo.Bar", "class:com.foo.Bar", "'class:' is not a selector weft knows");
  expect_rejected("name:a; name:  ", "name:", "empty name pattern");
  expect_rejected("Name:x", "Name:x", "'Name:' is not a selector");
}

TEST(FiberList, ModesOtherThanByNameIgnoreTheList) {
  EXPECT_FALSE(runs_on_fibers(RunMode::threads, "anything"));
  EXPECT_TRUE(runs_on_fibers(RunMode::fibers, "anything"));
}

// --- the environment, in child processes ------------------------------------

TEST(FiberListChild, ListedNamesRunOnFibers) {
  if (!test::child_mode("listed")) GTEST_SKIP() << "runs in the child of FiberListEnvironment.SelectsByName";
  EXPECT_TRUE(FiberList::from_environment().lists("rpc-handler"));
  Pool listed{{.name = "rpc-handler", .threads = 2}};
  Pool unlisted{{.name = "db", .threads = 2}};
  EXPECT_TRUE(listed.runs_on_fibers());
  EXPECT_FALSE(unlisted.runs_on_fibers());
  EXPECT_TRUE(listed.submit([] { return this_fiber::is_fiber(); }).get());
  EXPECT_FALSE(unlisted.submit([] { return this_fiber::is_fiber(); }).get());
  Thread t{"rpc-conn", [] {}};
  EXPECT_TRUE(t.runs_on_fiber());
  t.join();
  Thread u{"plain", [] {}};
  EXPECT_FALSE(u.runs_on_fiber());
  u.join();
  // Read once: a later change does not flip new pools.
  setenv("WEFT_FIBERS", "*", 1);
  Pool later{{.name = "db-2", .threads = 1}};
  EXPECT_FALSE(later.runs_on_fibers());
  EXPECT_EQ(default_scheduler().worker_count(), 3u);  // WEFT_WORKERS=3
}

TEST(FiberListChild, ABadValueIsReportedByEveryPool) {
  if (!test::child_mode("bad")) GTEST_SKIP() << "runs in the child of FiberListEnvironment.ReportsABadValue";
  for (int i = 0; i < 2; ++i) {
    try {
      Pool pool{{.name = "rpc-handler", .threads = 1}};
      ADD_FAILURE() << "a malformed WEFT_FIBERS was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("entry 'rpc-*'"), std::string::npos) << e.what();
    }
  }
  // Pools that fix their mode in code do not consult it.
  Pool fixed{{.name = "fixed", .threads = 1, .mode = RunMode::threads}};
  EXPECT_FALSE(fixed.runs_on_fibers());
}

TEST(FiberListEnvironment, SelectsByName) {
  int status = -1;
  const std::string out = test::run_child("listed", "WEFT_WORKERS=3 WEFT_FIBERS='name:rpc-*'",
                                          "FiberListChild.ListedNamesRunOnFibers", status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  EXPECT_EQ(out.find("SKIPPED"), std::string::npos) << out;
}

TEST(FiberListEnvironment, ReportsABadValue) {
  int status = -1;
  const std::string out =
      test::run_child("bad", "WEFT_FIBERS='rpc-*'", "FiberListChild.ABadValueIsReportedByEveryPool", status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  EXPECT_EQ(out.find("SKIPPED"), std::string::npos) << out;
}

TEST(FiberListEnvironment, ABadWorkerCountIsReported) {
  int status = -1;
  const std::string out = test::run_child("workers", "WEFT_WORKERS=lots WEFT_FIBERS='*'",
                                          "FiberListChild.ABadWorkerCountIsReported", status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

TEST(FiberListChild, ABadWorkerCountIsReported) {
  if (!test::child_mode("workers"))
    GTEST_SKIP() << "runs in the child of FiberListEnvironment.ABadWorkerCountIsReported";
  try {
    Pool pool{{.name = "any", .threads = 1}};
    ADD_FAILURE() << "WEFT_WORKERS=lots was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("WEFT_WORKERS='lots'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
