// One table of exit codes for every tool (gpuinit(8)): each tool's man page
// and --help list the same codes, all of them from that table, and the table
// is what tools/common/exit_codes.hpp defines.
#include "common/exit_codes.hpp"
#include "root_helpers.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <grp.h>
#include <gtest/gtest.h>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace gpuinit {

using testing::run_in_child;
using testing::run_process;

namespace {

std::string read_man(const std::string& page) {
    std::ifstream in(std::string(GPUINIT_TESTS_DIR) + "/../man/" + page);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The EXIT STATUS section of an scdoc page, up to the next section.
std::string exit_section(const std::string& page) {
    std::string text = read_man(page);
    size_t start = text.find("\n# EXIT STATUS\n");
    if (start == std::string::npos) {
        return {};
    }
    size_t end = text.find("\n# ", start + 1);
    return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Every *N* in a man page's section: the codes it documents.
std::set<int> starred_codes(const std::string& section) {
    std::set<int> codes;
    for (size_t at = section.find('*'); at != std::string::npos; at = section.find('*', at + 1)) {
        size_t digits = at + 1;
        while (digits < section.size() &&
               std::isdigit(static_cast<unsigned char>(section[digits]))) {
            ++digits;
        }
        if (digits > at + 1 && digits < section.size() && section[digits] == '*') {
            codes.insert(std::stoi(section.substr(at + 1, digits - at - 1)));
            at = digits;
        }
    }
    return codes;
}

// The numbers in a --help's "Exit status" paragraph, less man-page
// references such as gpuinit(8).
std::set<int> help_codes(const std::string& help) {
    std::set<int> codes;
    size_t start = help.find("Exit status");
    if (start == std::string::npos) {
        return codes;
    }
    size_t end = help.find("\n\n", start);
    std::string paragraph =
        help.substr(start, end == std::string::npos ? std::string::npos : end - start);
    for (size_t i = 0; i < paragraph.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(paragraph[i]))) {
            continue;
        }
        size_t end_digits = i;
        while (end_digits < paragraph.size() &&
               std::isdigit(static_cast<unsigned char>(paragraph[end_digits]))) {
            ++end_digits;
        }
        bool after_word = i > 0 && std::isalnum(static_cast<unsigned char>(paragraph[i - 1]));
        bool man_reference = i > 1 && paragraph[i - 1] == '(' &&
                             std::isalnum(static_cast<unsigned char>(paragraph[i - 2]));
        if (!after_word && !man_reference) {
            codes.insert(std::stoi(paragraph.substr(i, end_digits - i)));
        }
        i = end_digits;
    }
    return codes;
}

std::string show(const std::set<int>& codes) {
    std::string text;
    for (int code : codes) {
        text += (text.empty() ? "" : " ") + std::to_string(code);
    }
    return text;
}

struct ToolPages {
    const char* page;
    std::vector<std::vector<std::string>> helps; // gpuinit's arguments for each --help
};

const std::vector<ToolPages>& documented_tools() {
    static const std::vector<ToolPages> kTools = {
        {"gpu-mknod.8.scd", {{"mknod", "--help"}}},
        {"gpu-modload.8.scd", {{"modload", "--help"}}},
        {"gpu-persist.8.scd", {{"persist", "--help"}}},
        {"gpu-mig.8.scd", {{"mig", "--help"}}},
        {"gpuinit-status.8.scd", {{"status", "--help"}}},
        {"gpu-limit.8.scd",
         {{"limit", "--help"},
          {"limit", "daemon", "--help"},
          {"limit", "oci-hook", "--help"},
          {"gpu-limit-runtime", "--help"}}},
    };
    return kTools;
}

} // namespace

TEST(ExitTable, TheTableIsWhatTheToolsDefine) {
    std::set<int> documented = starred_codes(exit_section("gpuinit.8.scd"));
    std::set<int> defined = {tools::kExitOk,
                             tools::kExitUsage,
                             tools::kExitPartial,
                             tools::kExitFailed,
                             tools::kExitDiffers,
                             tools::kExitNotPermitted,
                             tools::kExitBusy,
                             tools::kExitCommandCannotRun,
                             tools::kExitCommandNotFound};
    EXPECT_EQ(show(documented), show(defined));
    EXPECT_EQ(tools::kExitNotPermitted, 5);
    EXPECT_EQ(tools::kExitDiffers, 4);
}

TEST(ExitTable, EveryManPageUsesOnlyTheTable) {
    std::set<int> table = starred_codes(exit_section("gpuinit.8.scd"));
    ASSERT_FALSE(table.empty());
    for (const auto& tool : documented_tools()) {
        std::string section = exit_section(tool.page);
        ASSERT_FALSE(section.empty()) << tool.page << " has no EXIT STATUS";
        EXPECT_NE(section.find("Codes follow the table in *gpuinit*(8)."), std::string::npos)
            << tool.page;
        std::set<int> codes = starred_codes(section);
        EXPECT_FALSE(codes.empty()) << tool.page;
        for (int code : codes) {
            EXPECT_TRUE(table.count(code)) << tool.page << " documents exit code " << code
                                           << ", which is not in gpuinit(8)'s table";
        }
    }
}

TEST(ExitTable, EachHelpListsWhatItsManPageDocuments) {
    for (const auto& tool : documented_tools()) {
        std::set<int> from_help;
        for (const auto& arguments : tool.helps) {
            std::vector<std::string> command = {GPUINIT_BIN};
            command.insert(command.end(), arguments.begin(), arguments.end());
            std::string output;
            ASSERT_EQ(run_process(command, &output), 0) << arguments.front() << ": " << output;
            std::set<int> codes = help_codes(output);
            EXPECT_FALSE(codes.empty()) << arguments.front() << " --help has no exit status";
            from_help.insert(codes.begin(), codes.end());
        }
        EXPECT_EQ(show(from_help), show(starred_codes(exit_section(tool.page))))
            << tool.page << " and its --help disagree";
    }
}

// Root, said first: as a user, the daemons say in one line that they need
// root, and exit 5, before they touch anything (before, a user got an EACCES
// on some path under /run).
TEST(RootFirst, TheDaemonsSayTheyNeedRootBeforeAnything) {
    const std::vector<std::vector<const char*>> commands = {
        {GPUINIT_BIN, "persist", "--no-hotplug", nullptr},
        {GPUINIT_BIN, "limit", "daemon", "--foreground", nullptr},
        {GPUINIT_BIN, "mknod", nullptr},
        {GPUINIT_BIN, "modload", nullptr},
        {GPUINIT_BIN, "mig", "sync", nullptr},
    };
    for (const auto& command : commands) {
        std::string output;
        int code = run_in_child(
            [&] {
                if (::geteuid() == 0 &&
                    (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
                     ::setresuid(65534, 65534, 65534) != 0)) {
                    return 99;
                }
                ::execv(command[0], const_cast<char* const*>(command.data()));
                return 98;
            },
            &output);
        EXPECT_EQ(code, tools::kExitNotPermitted) << command[1] << ": " << output;
        EXPECT_EQ(output.find("error: needs root to "), output.find(": ") + 2) << output;
        EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
    }
}

// The parsers themselves: a check that found nothing would pass anything.
TEST(ExitTable, TheParsersFindCodesAndSkipReferences) {
    EXPECT_EQ(show(help_codes("Exit status (gpuinit(8)): 0 ok; 3 nothing; run: CMD's (126 x, 127 "
                              "y).\n\nOther 9")),
              "0 3 126 127");
    EXPECT_EQ(show(starred_codes("# EXIT STATUS\n*0*\n\tok\n*4*\n\tdiffers; see *gpuinit*(8)")),
              "0 4");
}

} // namespace gpuinit
