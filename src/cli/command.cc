#include "cli/command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "cli/exit.h"
#include "trainscope/core/table.h"

namespace trainscope::cli {
namespace {

// The command line, kept for the internal-error line (set once, before parsing).
std::string* g_command_line = nullptr;

// "data clean": the names of the subcommands that were parsed, root excluded.
std::string VerbPath(const CLI::App& root) {
  std::string path;
  const CLI::App* app = &root;
  while (true) {
    const std::vector<CLI::App*> subs = app->get_subcommands();
    if (subs.empty()) break;
    app = subs.front();
    if (!path.empty()) path += ' ';
    path += app->get_name();
  }
  return path;
}

std::string JoinArgs(int argc, char** argv) {
  std::string s = "trainscope";
  for (int i = 1; i < argc; ++i) {
    s += ' ';
    s += argv[i];
    if (s.size() > 400) {
      s += " ...";
      break;
    }
  }
  return s;
}

int InternalError(const CLI::App& app, const char* what) {
  const std::string verb = VerbPath(app);
  std::fprintf(stderr, "trainscope %s: internal error: %s (command: %s)\n",
               verb.empty() ? "" : verb.c_str(), what,
               g_command_line ? g_command_line->c_str() : "?");
  std::fprintf(stderr,
               "hint: this is a bug in trainscope, not in your input's handling; please report "
               "it with the command and the input\n");
  return kExitInternal;
}

// An exception that escapes a worker thread ends in std::terminate, not in ParseAndRun:
// say what it was in one line and exit 3 instead of aborting with a core dump.
[[noreturn]] void OnTerminate() {
  const char* what = "unknown exception";
  std::string text;
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      text = ex.what();
      what = text.c_str();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an exception";
  }
  std::fprintf(stderr, "trainscope: internal error: %s (command: %s)\n", what,
               g_command_line ? g_command_line->c_str() : "?");
  std::fflush(stderr);
  _exit(kExitInternal);
}

// The first argument that is not a root flag, when it names no verb; "" otherwise.
std::string UnknownVerb(const CLI::App& app, int argc, char** argv) {
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;
  if (i >= argc) return "";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(argv[i])) return "";
  }
  return argv[i];
}

std::string VerbList(const CLI::App& app) {
  std::string list;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!list.empty()) list += ", ";
    list += sub->get_name();
  }
  return list;
}

// Help text fits 120 columns: descriptions are word-wrapped beside the 30-column name column
// (format_help indents the lines after a '\n'), the app's own description and footer at 120.
constexpr size_t kHelpWidth = 120;

// Wrapped without the last line's newline: CLI11 adds its own.
std::string Wrap(const std::string& text, size_t width) {
  if (text.empty()) return text;
  std::string out = WrapText(text, width);
  out.pop_back();
  return out;
}

class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    std::stringstream out;
    CLI::detail::format_help(out, make_option_name(opt, is_positional) + make_option_opts(opt),
                             Wrap(make_option_desc(opt), kHelpWidth - column_width_),
                             column_width_);
    return out.str();
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true),
                             Wrap(sub->get_description(), kHelpWidth - column_width_),
                             column_width_);
    return out.str();
  }
  std::string make_description(const CLI::App* app) const override {
    const std::string d = app->get_description();
    return d.empty() ? "" : Wrap(d, kHelpWidth) + "\n";
  }
  std::string make_footer(const CLI::App* app) const override {
    const std::string f = app->get_footer();
    return f.empty() ? "" : Wrap(f, kHelpWidth) + "\n";
  }
};

// One example per verb, shown at the end of its --help.
void AddExamples(CLI::App& app, const std::string& path) {
  static const std::map<std::string, std::string> kExamples = {
      {"env fingerprint", "trainscope env fingerprint -o node1.json"},
      {"env diff", "trainscope env diff node1.json node2.json"},
      {"env check", "trainscope env check node1.json --json"},
      {"doctor", "trainscope doctor --quick"},
      {"selftest device", "trainscope selftest device --quick"},
      {"selftest comm", "trainscope selftest comm -n 2 --max-bytes 64M"},
      {"selftest train", "trainscope selftest train --quick"},
      {"launch", "trainscope launch -n 2 -- trainscope train --config configs/default.json"},
      {"train", "trainscope train --config configs/default.json --run-dir runs/a --resume latest"},
      {"data scan", "trainscope data scan corpus.jsonl.zst --tokenizer tokenizer.json"},
      {"data clean", "trainscope data clean corpus.jsonl -o clean.jsonl --rules gopher,c4"},
      {"data pack",
       "trainscope data pack clean.jsonl -o packed/train --seq-len 2048 --tokenizer "
       "tokenizer.json"},
      {"data compare", "trainscope data compare traffic.jsonl calibration.jsonl"},
      {"data stats", "trainscope data stats features.npy"},
      {"trace analyze", "trainscope trace analyze ./profiler_logs --export steps.json"},
      {"diagnose", "trainscope diagnose runs/a output/checkpoint-500/trainer_state.json"},
      {"plan",
       "trainscope plan --layers 32 --hidden 4096 --heads 32 --seq 4096 --vocab 32000 "
       "--devices 64 --nodes 8 --device-memory 80"},
      {"hang analyze", "trainscope hang analyze runs/launch-20261130T120000Z-4242/hang"},
      {"ckpt inspect", "trainscope ckpt inspect runs/a/checkpoints/step-1000"},
      {"ckpt verify", "trainscope ckpt verify runs/a/checkpoints"},
      {"ckpt diff",
       "trainscope ckpt diff runs/a/checkpoints/step-1000 runs/b/checkpoints/step-1000"},
  };
  if (auto it = kExamples.find(path); it != kExamples.end()) {
    const std::string footer = app.get_footer();
    app.footer((footer.empty() ? "" : footer + "\n\n") + "example: " + it->second);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    AddExamples(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name());
  }
}

// main() ignores SIGPIPE (comm sockets), so a reader that went away (`trainscope ... | head`)
// shows only as a failed write on stdout. End as the SIGPIPE death it would have been (the
// shell's 141, `set -o pipefail` sees it); any other write failure (a full disk) is named.
int CheckStdout(int code) {
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) || std::cout.fail();
  if (!failed) return code;
  struct stat st;
  if (::fstat(STDOUT_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    std::signal(SIGPIPE, SIG_DFL);
    std::raise(SIGPIPE);
    return 128 + SIGPIPE;
  }
  std::fprintf(stderr, "trainscope: error: standard output: a write failed (disk full?)\n");
  return kExitUsage;
}

}  // namespace

int ParseAndRun(CLI::App& app, CommandContext& ctx, int argc, char** argv) {
  g_command_line = new std::string(JoinArgs(argc, argv));  // lives as long as the process
  std::set_terminate(OnTerminate);
  AddExamples(app, "");
  if (const std::string unknown = UnknownVerb(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "trainscope: error: unknown verb '%s' (verbs: %s)\n", unknown.c_str(),
                 VerbList(app).c_str());
    std::fprintf(stderr, "hint: `trainscope --help` lists them\n");
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return CheckStdout(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return CheckStdout(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return CheckStdout(app.exit(e));
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    return InternalError(app, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return InternalError(app, e.what());
  } catch (...) {
    return InternalError(app, "unknown exception");
  }
  return CheckStdout(ctx.exit_code);
}

void ConfigureRoot(CLI::App& app) {
  // Usage lines say `trainscope`, not the path the binary was started by (argv[0] would be
  // e.g. build/bin/trainscope, or trainscope-torch after the exec).
  app.name("trainscope");
  // --help shows each option's default (subcommands inherit this; set before they exist).
  app.option_defaults()->always_capture_default();
  app.formatter(std::make_shared<WrappingFormatter>());  // inherited by subcommands
  app.set_version_flag("--version", std::string("trainscope ") + TS_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  // Bad usage is one line naming the command being parsed, plus where to read more; the
  // whole help is for --help. Exit 2.
  app.failure_message([](const CLI::App* root, const CLI::Error& e) {
    const std::string verb = VerbPath(*root);
    const std::string cmd = verb.empty() ? "trainscope" : "trainscope " + verb;
    return cmd + ": error: " + e.what() + "\nhint: `" + cmd + " --help` lists the options\n";
  });
}

bool IsTorchVerb(int argc, char** argv) {
  // The verb is the first argument that is not a root flag.
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;
  if (i >= argc) return false;
  std::string verb = argv[i];
  if (verb == "train") return true;
  if (verb != "selftest") return false;
  int j = i + 1;
  while (j < argc && argv[j][0] == '-') ++j;
  if (j >= argc) return false;
  std::string part = argv[j];
  return part == "train" || part == "device";
}

}  // namespace trainscope::cli
