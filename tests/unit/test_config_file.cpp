// --config workload files (tools/src/config_file.cpp): what is refused before parsing (missing
// paths, directories, FIFOs, devices, oversized files), and how a TOML table fills a
// subcommand's options (flags win, unknown keys and wrong types are usage errors naming the key).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "cli_error.hpp"
#include "config_file.hpp"
#include "test_support.hpp"

using feedline::tools::apply_config_file;
using feedline::tools::apply_config_text;
using feedline::tools::UsageError;

namespace {

// Options of each kind the real commands use.
struct Opts {
  std::string format = "auto";
  unsigned batch_size = 32;
  std::uint64_t seed = 0;
  double au_target = 0;
  int decode_nice = 5;
  bool direct = false;
  std::optional<unsigned> rank;
};

struct Cmd {
  CLI::App app{"test"};
  CLI::App* run = nullptr;
  Opts o;
  std::string config;

  Cmd() {
    run = app.add_subcommand("run", "run");
    run->add_option("--config", config, "workload file");
    run->add_option("--format", o.format, "format");
    run->add_option("--batch-size", o.batch_size, "batch")->check(CLI::Range(1u, 65536u));
    run->add_option("--seed", o.seed, "seed");
    run->add_option("--au-target", o.au_target, "au")->check(CLI::Range(0.0, 1.0));
    run->add_option("--decode-nice", o.decode_nice, "nice")->check(CLI::Range(0, 19));
    run->add_flag("--direct", o.direct, "direct");
    run->add_option("--rank", o.rank, "rank");
  }
  void parse(const std::string& args) { app.parse("run " + args, false); }
};

// The message of the UsageError `f` throws ("" when it throws nothing).
template <typename F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("config: a TOML table fills the options the command line did not set", "[config]") {
  Cmd c;
  c.parse("--batch-size 8");
  apply_config_text(
      *c.run,
      "format = \"tar\"\nbatch-size = 400\nseed = 18446744073709551\nau-target = 0.9\n"
      "decode-nice = 0\ndirect = true\nrank = 3\n",
      "w.toml");
  CHECK(c.o.batch_size == 8);  // the flag wins
  CHECK(c.o.format == "tar");
  CHECK(c.o.seed == 18446744073709551u);
  CHECK(c.o.au_target == Approx(0.9));
  CHECK(c.o.decode_nice == 0);
  CHECK(c.o.direct);
  REQUIRE(c.o.rank);
  CHECK(*c.o.rank == 3);
}

TEST_CASE("config: unknown keys, wrong types and refused values name the file, line and key",
          "[config]") {
  struct Case {
    const char* text;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"format = \"tar\"\nbogus = 1\n", {"--config w.toml: line 2: unknown key 'bogus'"}},
      {"batch_size = 4\n", {"unknown key 'batch_size'", "did you mean 'batch-size'?"}},
      {"config = \"other.toml\"\n", {"unknown key 'config'"}},
      {"help = true\n", {"unknown key 'help'"}},
      {"[run]\nbatch-size = 4\n", {"unknown key 'run'"}},
      {"batch-size = \"many\"\n", {"line 1: key 'batch-size'"}},
      {"batch-size = 0\n", {"key 'batch-size'"}},
      {"au-target = 1.5\n", {"key 'au-target'"}},
      {"batch-size = [1, 2]\n",
       {"key 'batch-size' must be a string, number or boolean (not an array)"}},
      {"seed = 1979-05-27\n",
       {"key 'seed' must be a string, number or boolean (not a date or time)"}},
      {"format = \"ta\\u0000r\"\n", {"key 'format': the value holds a NUL character"}},
      {"\nbatch-size = = 4\n", {"--config w.toml: line 2, column"}},
      {"\xff\xfe = 1\n", {"--config w.toml: line 1"}},
      {"\"a\\u001b[2Jb\" = 1\n", {"unknown key 'a\\x1b[2Jb'"}},
      // Where toml++ 3.3 would ask whether a non-ASCII character is whitespace (undefined
      // behaviour in it for some ranges), it sees a stand-in; its error shows the original.
      {"format = \"tar\"\nbatch-size = 1\xc3\xa9\n", {"line 2, column 15: ", "saw '\xc3\xa9'"}},
      {"\xc3\xa9 = 1\n", {"line 1, column 1: ", "saw '\xc3\xa9'"}},
      {"[\xe3\x80\x81]\n", {"line 1, column 2: ", "saw '\xe3\x80\x81'"}},
      {"batch-size = 8__\"\"\"__\xef\xb3\xbf\"\"\"\n", {"--config w.toml: line 1, column"}},
      {"seed = 1 'x\xc3\xa9'\n", {"--config w.toml: line 1, column"}},
      // Found by fuzz_config: toml++ asks about whitespace on its error path too (U+FCFF here).
      {"\x01"
       "batch-size =-8___.___\"...'''...\"\"___\xef\xb3\xbf___\nrank =.\x1fs5\n",
       {"--config w.toml: line 1, column"}},
      // A stand-in is never one the file already holds: U+049A (the first) is in it here.
      {"format = \"\xd2\x9a\"\n\xc2\xa7 = 1\n", {"line 2, column 1: ", "saw '\xc2\xa7'"}},
  };
  for (const auto& k : cases) {
    INFO(k.text);
    Cmd c;
    c.parse("");
    const std::string what = usage_error_of([&] { apply_config_text(*c.run, k.text, "w.toml"); });
    INFO(what);
    REQUIRE_FALSE(what.empty());
    for (const auto& s : k.says) CHECK(what.find(s) != std::string::npos);
  }
}

TEST_CASE("config: an unknown key's error says where the keys are, and the likely one",
          "[config]") {
  Cmd c;
  c.parse("");
  const std::string what =
      usage_error_of([&] { apply_config_text(*c.run, "seed = 1\nfrobnicate = 1\n", "w.toml"); });
  INFO(what);
  // It once read "(keys are `` option names, e.g. batch-size)": the command's name was lost.
  CHECK(what.find("``") == std::string::npos);
  CHECK(what.find("--config w.toml: line 2: unknown key 'frobnicate': the keys are the long "
                  "options of `feedline run` without their dashes") != std::string::npos);
  CHECK(what.find("`feedline run --help` lists them") != std::string::npos);
  CHECK(what.find("did you mean") == std::string::npos);  // nothing is close to it
  // A typo a letter or two away, and underscores for dashes, name the key meant.
  CHECK_THAT(usage_error_of([&] { apply_config_text(*c.run, "batch-sise = 4\n", "w.toml"); }),
             Catch::Contains("unknown key 'batch-sise': did you mean 'batch-size'? the keys are"));
  CHECK_THAT(usage_error_of([&] { apply_config_text(*c.run, "au_target = 0.5\n", "w.toml"); }),
             Catch::Contains("did you mean 'au-target'?"));
  // "config" and "help" are options, but not settings: never suggested.
  CHECK_THAT(usage_error_of([&] { apply_config_text(*c.run, "helq = 1\n", "w.toml"); }),
             !Catch::Contains("did you mean"));
  // A long key is cut, before a character and not in the middle of one.
  std::string long_key = "k";
  for (int i = 0; i < 60; ++i) long_key += "\xc3\xa9";
  const std::string cut =
      usage_error_of([&] { apply_config_text(*c.run, "\"" + long_key + "\" = 1\n", "w.toml"); });
  CHECK_THAT(cut, Catch::Contains("unknown key 'k\xc3\xa9\xc3\xa9"));
  CHECK_THAT(cut, Catch::Contains("\xc3\xa9...'"));
  CHECK_THAT(cut, !Catch::Contains("\\x"));
  // A nested command is named whole.
  CLI::App app{"test"};
  CLI::App* bench = app.add_subcommand("bench", "bench");
  CLI::App* acc = bench->add_subcommand("accelerators", "accelerators");
  unsigned n = 0;
  acc->add_option("--max-accelerators", n, "n");
  CHECK_THAT(usage_error_of([&] { apply_config_text(*acc, "bogus = 1\n", "w.toml"); }),
             Catch::Contains("the long options of `feedline bench accelerators`"));
}

TEST_CASE("config: UTF-8 in strings and comments is read", "[config]") {
  Cmd c;
  c.parse("");
  apply_config_text(*c.run,
                    "\xef\xbb\xbf# Dur\xc3\xa9"
                    "e \xe2\x89\xa5 90%\nformat = \"t\xc3\xa9r\" # \xc3\xa9\n"
                    "\"decode-nice\" = 3\n",
                    "w.toml");
  CHECK(c.o.format == "t\xc3\xa9r");
  CHECK(c.o.decode_nice == 3);
  Cmd m;
  m.parse("");
  apply_config_text(*m.run, "format = \"\"\"\n\xc3\xa9 \"\"\"\"\nseed = 4\n", "w.toml");
  CHECK(m.o.format == "\xc3\xa9 \"");
  CHECK(m.o.seed == 4);
  // Strings open after '=', '[', ',', '{', '.' and at a line's start (a quoted key).
  Cmd q;
  q.parse("");
  apply_config_text(*q.run, "\"format\" = \'d\xc3\xa9j\xc3\xa0\'\n", "w.toml");
  CHECK(q.o.format == "d\xc3\xa9j\xc3\xa0");
  // Characters toml++ 3.3 cannot classify (U+00A7, U+3001, U+FCFF) reach it as stand-ins and
  // come back as they were, after a line-ending backslash too.
  Cmd u;
  u.parse("");
  apply_config_text(*u.run, "format = \"\"\"\\\n  \xc2\xa7\xe3\x80\x81\xef\xb3\xbf\xd2\x9a\"\"\"\n",
                    "w.toml");
  CHECK(u.o.format == "\xc2\xa7\xe3\x80\x81\xef\xb3\xbf\xd2\x9a");
}

TEST_CASE("config: paths that are not a readable workload file are refused before parsing",
          "[config]") {
  const auto dir = feedline::testing::scratch_dir("config_file");
  Cmd c;
  c.parse("");
  auto refused = [&](const std::string& path) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string what = usage_error_of([&] { apply_config_file(*c.run, path); });
    CHECK(std::chrono::steady_clock::now() - t0 <
          std::chrono::seconds(5));  // never waits on the path
    return what;
  };

  const std::string missing = (dir / "no-such.toml").string();
  CHECK(refused(missing) == "cannot read --config " + missing + ": No such file or directory");
  CHECK(refused("") == "--config needs a file name (it was given an empty one)");
  CHECK(refused(dir.string()).find("is not a regular file (a directory)") != std::string::npos);
  CHECK(refused("/dev/zero").find("/dev/zero is not a regular file (a character device)") !=
        std::string::npos);
  const auto fifo = dir / "fifo.toml";
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(refused(fifo.string()).find("is not a regular file (a FIFO)") != std::string::npos);

  // The size cap: a file of exactly kMaxConfigFileBytes (a TOML comment) is read; one byte more is
  // not.
  const auto big = dir / "big.toml";
  std::string text = "batch-size = 16\n#";
  text.resize(feedline::tools::kMaxConfigFileBytes, 'x');
  std::ofstream(big, std::ios::binary) << text;
  apply_config_file(*c.run, big.string());
  CHECK(c.o.batch_size == 16);
  std::ofstream(big, std::ios::binary | std::ios::app) << "x";
  CHECK(
      refused(big.string()).find("is 1048577 bytes, more than the 1 MiB a workload file may be") !=
      std::string::npos);

  // A parse error names the file as given.
  const auto bad = dir / "bad.toml";
  std::ofstream(bad) << "batch-size = 4\nformat = \n";
  CHECK(refused(bad.string()).find("--config " + bad.string() + ": line 2, column") !=
        std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("config: [accelerator-types.NAME] tables, chosen by --accelerator-type", "[config]") {
  struct TypedCmd {
    CLI::App app{"test"};
    CLI::App* run = nullptr;
    std::string config, type, compute_time;
    unsigned batch_size = 32;
    TypedCmd() {
      run = app.add_subcommand("run", "run");
      feedline::tools::add_config_options(*run, config, type);
      run->add_option("--compute-time", compute_time, "step");
      run->add_option("--batch-size", batch_size, "batch")->check(CLI::Range(1u, 65536u));
    }
  };
  const std::string file =
      "compute-time = \"224ms\"\nbatch-size = 400\n"
      "[accelerator-types.h100]\ncompute-time = \"224ms\"\n"
      "[accelerator-types.a100]\ncompute-time = \"435ms\"\nbatch-size = 200\n";
  auto applied = [&](const std::string& args, const std::string& text = "") {
    auto c = std::make_unique<TypedCmd>();
    c->app.parse("run " + args, false);
    apply_config_text(*c->run, text.empty() ? file : text, "w.toml");
    return c;
  };
  auto refused = [&](const std::string& args, const std::string& text = "") {
    return usage_error_of([&] { applied(args, text); });
  };
  // No type: the file's defaults.
  auto none = applied("");
  CHECK(none->compute_time == "224ms");
  CHECK(none->batch_size == 400);
  CHECK(none->type.empty());
  // A type: its table wins over the defaults; the command line over both.
  auto a100 = applied("--accelerator-type a100");
  CHECK(a100->compute_time == "435ms");
  CHECK(a100->batch_size == 200);
  auto flag = applied("--accelerator-type a100 --compute-time 1ms");
  CHECK(flag->compute_time == "1ms");
  CHECK(flag->batch_size == 200);
  CHECK(applied("--accelerator-type h100")->batch_size == 400);
  // The file may choose its own default type; the flag still wins.
  const std::string chooses = "accelerator-type = \"a100\"\n" + file;
  auto by_file = applied("", chooses);
  CHECK(by_file->compute_time == "435ms");
  CHECK(by_file->type == "a100");
  CHECK(applied("--accelerator-type h100", chooses)->compute_time == "224ms");

  CHECK_THAT(refused("--accelerator-type b200"),
             Catch::Contains("--accelerator-type b200: --config w.toml has settings for a100, "
                             "h100 only"));
  CHECK_THAT(refused("--accelerator-type a100", "compute-time = \"1ms\"\n"),
             Catch::Contains("has no [accelerator-types.NAME] tables"));
  // Every table's keys are checked, chosen or not; their values by the options when applied.
  CHECK_THAT(refused("", file + "[accelerator-types.v100]\nbogus = 1\n"),
             Catch::Contains("unknown key 'bogus' in [accelerator-types.v100]"));
  CHECK_THAT(refused("", file + "[accelerator-types.v100]\nbatch-size = [1]\n"),
             Catch::Contains("key 'batch-size' must be a string, number or boolean"));
  CHECK_THAT(
      refused("--accelerator-type v100", file + "[accelerator-types.v100]\nbatch-size = 0\n"),
      Catch::Contains("line 9: key 'batch-size'"));
  CHECK_THAT(refused("", "accelerator-types = 3\n"), Catch::Contains("must be tables"));
  CHECK_THAT(refused("", "[accelerator-types]\na100 = \"435ms\"\n"),
             Catch::Contains("'accelerator-types.a100' must be a table"));
  // A command without --accelerator-type takes no such tables.
  Cmd plain;
  plain.parse("");
  CHECK_THAT(usage_error_of([&] { apply_config_text(*plain.run, file, "w.toml"); }),
             Catch::Contains("for a command with --accelerator-type"));
  // --accelerator-type needs a workload file.
  auto lone = std::make_unique<TypedCmd>();
  lone->app.parse("run --accelerator-type a100", false);
  CHECK_THAT(usage_error_of([&] { feedline::tools::apply_config_options(*lone->run, ""); }),
             Catch::Contains("give the file with --config"));
}
