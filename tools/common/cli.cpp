#include "cli.hpp"

#include "exit_codes.hpp"
#include "gpuinit/base/text.hpp"

#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace gpuinit::tools {

namespace {

constexpr const char* kCommonShorts = "r:jvqhV";

const option kCommonLongs[] = {
    {"root", required_argument, nullptr, 'r'}, {"json", no_argument, nullptr, 'j'},
    {"verbose", no_argument, nullptr, 'v'},    {"quiet", no_argument, nullptr, 'q'},
    {"help", no_argument, nullptr, 'h'},       {"version", no_argument, nullptr, 'V'},
};

void print(FILE* stream, const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stream);
}

} // namespace

Cli::Cli(const char* program, const char* usage, int usage_exit)
    : program_(program), usage_(usage), usage_exit_(usage_exit) {}

void Cli::add_options(std::string shorts, std::vector<option> longs) {
    shorts_ = std::move(shorts);
    longs_ = std::move(longs);
}

int Cli::usage_error(const std::string& message) {
    print(stderr,
          std::string(program_) + ": " + printable(message) + "\nTry '" + program_ + " --help'.\n");
    exit_code_ = usage_exit_;
    return usage_exit_;
}

int Cli::refuse_unless_root(bool needed, const char* what, const char* hint) {
    if (!needed || ::geteuid() == 0) {
        return 0;
    }
    std::string line =
        std::string(program_) + ": error: needs root to " + what + "; run it as root";
    if (hint != nullptr && *hint != '\0') {
        line += std::string(" or ") + hint;
    }
    print(stderr, line + "\n");
    return kExitNotPermitted;
}

void Cli::finalize() {
    if (finalized_) {
        return;
    }
    bool stop_at_operand = !shorts_.empty() && shorts_.front() == '+';
    std::string own = stop_at_operand ? shorts_.substr(1) : shorts_;
    shorts_ = std::string(stop_at_operand ? "+" : "") + ":" + own + kCommonShorts;
    longs_.insert(longs_.end(), std::begin(kCommonLongs), std::end(kCommonLongs));
    longs_.push_back({nullptr, 0, nullptr, 0});
    finalized_ = true;
}

bool Cli::subcommand_is(int argc, char** argv, std::initializer_list<const char*> words) {
    finalize();
    split_command(argc, argv);
    std::vector<char*> copy(argv, argv + argc);
    copy.push_back(nullptr);
    int saved_optind = optind;
    int saved_opterr = opterr;
    int saved_optopt = optopt;
    char* saved_optarg = optarg;
    opterr = 0;
    optind = 0; // glibc: start afresh
    while (getopt_long(argc, copy.data(), shorts_.c_str(), longs_.data(), nullptr) != -1) {
    }
    const char* operand = optind < argc ? copy[optind] : nullptr;
    optind = saved_optind;
    opterr = saved_opterr;
    optopt = saved_optopt;
    optarg = saved_optarg;
    for (const char* word : words) {
        if (operand != nullptr && std::strcmp(operand, word) == 0) {
            return true;
        }
    }
    return false;
}

int Cli::next(int argc, char** argv) {
    if (!started_) {
        finalize();
        opterr = 0; // the messages are ours
        optind = 1;
        started_ = true;
    }
    while (exit_code_ < 0) {
        int opt = getopt_long(argc, argv, shorts_.c_str(), longs_.data(), nullptr);
        switch (opt) {
        case -1:
            return -1;
        case 'r':
            if (*optarg == '\0') {
                usage_error("--root needs a directory; an empty root is not '/' (say --root /)");
                break;
            }
            common.root = optarg;
            break;
        case 'j':
            common.json = true;
            break;
        case 'v':
            common.verbosity = 1;
            break;
        case 'q':
            common.verbosity = -1;
            break;
        case 'h':
            print(stdout, usage_);
            exit_code_ = 0;
            break;
        case 'V':
            print(stdout, std::string(program_) + " " GPUINIT_VERSION "\n");
            exit_code_ = 0;
            break;
        case ':':
            usage_error(std::string("option ") + printable(argv[optind - 1]) + " needs a value");
            break;
        case '?':
            usage_error("unknown option " + printable(argv[optind - 1]));
            break;
        default:
            return opt;
        }
    }
    return -1;
}

char** split_command(int& argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) {
            argc = i;
            return argv + i + 1;
        }
    }
    return nullptr;
}

} // namespace gpuinit::tools
