// The options every tool shares, parsed the same way everywhere:
//   -r, --root DIR   -j, --json   -v, --verbose   -q, --quiet
//   -h, --help       -V, --version
#pragma once

#include <getopt.h>
#include <initializer_list>
#include <string>
#include <vector>

namespace gpuinit::tools {

struct CommonOptions {
    std::string root = "/";
    bool json = false;
    int verbosity = 0; // -1 quiet (errors only), 0 normal, 1 verbose
};

class Cli {
  public:
    // `usage` is the --help text; `usage_exit` the tool's usage-error code.
    Cli(const char* program, const char* usage, int usage_exit);

    // Adds the tool's own options (before the shared ones). `shorts` is in
    // getopt's syntax; a leading '+' stops at the first non-option.
    void add_options(std::string shorts, std::vector<option> longs);

    // The next option that is the tool's own: its code (the short letter
    // or the long option's value); -1 when the options end. Shared options
    // are taken here; after -1, exit_code() says whether the tool must
    // return now (help, version, usage error) and with what.
    int next(int argc, char** argv);

    // Whether the first operand (the subcommand, before any "--") is one of
    // `words`, as next() would find it: an option's value (pick -p sync)
    // is none. Parses a copy of argv, which getopt would permute, puts
    // getopt's state back and prints nothing.
    bool subcommand_is(int argc, char** argv, std::initializer_list<const char*> words);
    bool must_exit() const { return exit_code_ >= 0; }
    int exit_code() const { return exit_code_; }

    // Prints "program: message" and the hint, and makes next() end with the
    // usage exit code; returns that code.
    int usage_error(const std::string& message);

    // Root, said first: when the effective user is not root and `needed`,
    // prints one line ("program: error: needs root to WHAT; run it as root
    // or HINT") and returns the not-permitted code (5), before the command
    // touches anything; 0 otherwise. A command that changes only a --root
    // tree passes `needed` false there, so a user may work on a copy.
    int refuse_unless_root(bool needed, const char* what, const char* hint);

    CommonOptions common;

  private:
    const char* program_;
    const char* usage_;
    int usage_exit_;
    int exit_code_ = -1;
    std::string shorts_;
    std::vector<option> longs_;
    bool finalized_ = false;
    bool started_ = false;

    void finalize();
};

// Splits off a command to run, given after the first "--" (getopt would mix
// its words with ours): returns its argv (nullptr without "--") and makes
// argc end before the "--".
char** split_command(int& argc, char** argv);

} // namespace gpuinit::tools
