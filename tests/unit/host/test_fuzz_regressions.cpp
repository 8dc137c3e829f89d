// Inputs the fuzz targets (tests/fuzz) found breaking the host layer's
// parsers, each kept as a regression test.
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/policy.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

// fuzz_policy, "gpu=* group=<262 bytes>{minor}": the name was checked with
// {minor} as "0", so it fit in 256 bytes, and GPU 253's group (two bytes
// longer) was a name no group file could hold. The widest minor is checked.
TEST(FuzzRegressions, GroupWithMinorFitsForEveryMinor) {
    std::string longest_that_fits = "gpu=* group=" + std::string(253, 'g') + "{minor}\n";
    auto policy = Policy::parse(longest_that_fits, "conf");
    ASSERT_TRUE(policy) << policy.error().text();
    AccessRule rule = policy->rule_for_gpu({253, "0000:17:00.0", ""});
    EXPECT_EQ(rule.group.size(), 256u);
    EXPECT_TRUE(valid_account_name(rule.group));

    std::string one_too_long = "gpu=* group=" + std::string(254, 'g') + "{minor}\n";
    auto refused = Policy::parse(one_too_long, "conf");
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().text().find("is not a valid group name"), std::string::npos)
        << refused.error().text();
}

} // namespace gpuinit
