#include "gpuinit/base/diag.hpp"
#include "gpuinit/base/result.hpp"

#include <cerrno>
#include <gtest/gtest.h>

namespace gpuinit {

TEST(Diagnostics, OneRecordWithSeverityCodeAndPlace) {
    Diagnostic parse = parse_error("/proc/devices", 4, "expected '<major> <name>'");
    EXPECT_EQ(parse.severity, Severity::Error);
    EXPECT_EQ(parse.code, EINVAL);
    EXPECT_EQ(parse.text(), "/proc/devices:4: expected '<major> <name>'");
    Diagnostic os = os_error(ENOENT, "cannot open /dev/x");
    EXPECT_EQ(os.text(), "cannot open /dev/x: No such file or directory");
    EXPECT_EQ(os.code, ENOENT);

    Diagnostics all;
    all.warning("w", Location::in_file("f"));
    EXPECT_FALSE(all.has_errors());
    all.error("e", Location::of_device("/dev/nvidia0", "nvidia0"), EPERM);
    EXPECT_TRUE(all.has_errors());
    EXPECT_EQ(all.count(Severity::Warning), 1u);
    EXPECT_EQ(all.items()[0].text(), "f: w");
    EXPECT_EQ(all.items()[1].where.group, "nvidia0");
}

TEST(Diagnostics, ResultCarriesOne) {
    Result<int> failed = error("no", ENOSPC);
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().code, ENOSPC);
    EXPECT_EQ(failed.value_or(7), 7);
    Result<int> fine = 3;
    EXPECT_EQ(fine.value_or(7), 3);
}

} // namespace gpuinit
