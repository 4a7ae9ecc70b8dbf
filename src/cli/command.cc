#include "cli/command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "trainscope/core/exit.h"

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

}  // namespace

int ParseAndRun(CLI::App& app, CommandContext& ctx, int argc, char** argv) {
  g_command_line = new std::string(JoinArgs(argc, argv));  // lives as long as the process
  std::set_terminate(OnTerminate);
  if (const std::string unknown = UnknownVerb(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "trainscope: error: unknown verb '%s' (verbs: %s)\n", unknown.c_str(),
                 VerbList(app).c_str());
    std::fprintf(stderr, "hint: `trainscope --help` lists them\n");
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
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
  return ctx.exit_code;
}

void ConfigureRoot(CLI::App& app) {
  // Usage lines say `trainscope`, not the path the binary was started by (argv[0] would be
  // e.g. build/bin/trainscope, or trainscope-torch after the exec).
  app.name("trainscope");
  // --help shows each option's default (subcommands inherit this; set before they exist).
  app.option_defaults()->always_capture_default();
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

}  // namespace trainscope::cli

namespace trainscope::cli {

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
