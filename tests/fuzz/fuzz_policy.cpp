// gpu-restriction.conf: Policy::parse, then the rules it gives GPUs named
// by its own gpu= words and by a fixed set, the control nodes, and the
// unmatched-rule warnings.
#include "fuzz_check.hpp"
#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/pci.hpp"
#include "gpuinit/host/policy.hpp"

#include <algorithm>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

void check_rule(const AccessRule& rule, const Policy& policy) {
    // A name, or an id written as a number (gpu-restriction.conf(5)).
    FUZZ_CHECK(valid_account_name(rule.group) || account_number(rule.group));
    FUZZ_CHECK(valid_account_name(rule.owner) || account_number(rule.owner));
    FUZZ_CHECK(rule.group.find("{minor}") == std::string::npos);
    FUZZ_CHECK(rule.mode <= 0777);
    FUZZ_CHECK(rule.origin == "built-in default" || rule.origin.starts_with(policy.source() + ":"));
    FUZZ_CHECK(format_mode(rule.mode).size() == 4);
}

// GPUs for the lookups: a few fixed ones, and one for every gpu= value of
// the rules that is a selector (so that rules do match).
std::vector<GpuIdentity> gpus_named_in(std::string_view text) {
    std::vector<GpuIdentity> gpus = {
        {0, "0000:17:00.0", "GPU-558ce120-5b8b-16a1-87d4-ce157bba0000"},
        {1, "0000:27:00.0", ""},
        {253, "ffffffff:ff:1f.7", "GPU-0"},
    };
    for (std::string_view line : split_lines(text)) {
        for (std::string_view word : split_words(line.substr(0, line.find('#')))) {
            if (!word.starts_with("gpu=")) {
                continue;
            }
            auto selector = GpuSelector::parse(word.substr(4));
            if (!selector) {
                continue;
            }
            GpuIdentity gpu{static_cast<unsigned>(gpus.size() % 254), "0000:99:00.0", ""};
            switch (selector->kind()) {
            case GpuSelector::Kind::Minor:
                gpu.minor = selector->minor();
                break;
            case GpuSelector::Kind::Bdf:
                gpu.bdf = selector->key();
                break;
            case GpuSelector::Kind::Uuid:
                gpu.uuid = selector->key();
                break;
            }
            FUZZ_CHECK(selector->matches(gpu));
            gpus.push_back(gpu);
        }
    }
    return gpus;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = as_text(data, size);
    auto policy = Policy::parse(text, "/etc/gpu-restriction.conf");
    if (!policy) {
        check_diagnostic(policy.error());
        FUZZ_CHECK(policy.error().where.line >= 1 && policy.error().where.line <= line_count(text));
        return 0;
    }
    FUZZ_CHECK(policy->from_file());
    FUZZ_CHECK(policy->source() == "/etc/gpu-restriction.conf");
    std::vector<GpuIdentity> gpus = gpus_named_in(text);
    for (const GpuIdentity& gpu : gpus) {
        AccessRule rule = policy->rule_for_gpu(gpu);
        check_rule(rule, *policy);
        if (rule.origin == "built-in default") {
            FUZZ_CHECK(rule.group == "nvidia" + std::to_string(gpu.minor));
            FUZZ_CHECK(rule.mode == kDefaultGpuMode && rule.owner == "root");
        }
    }
    for (std::string_view node : kControlNodes) {
        check_rule(policy->rule_for_control(node), *policy);
    }
    check_rule(policy->rule_for_control("nvidia-caps"), *policy);

    Diagnostics diagnostics;
    policy->report_unmatched(gpus, diagnostics);
    size_t some = diagnostics.items().size();
    policy->report_unmatched({}, diagnostics);
    FUZZ_CHECK(diagnostics.count(Severity::Error) == 0);
    for (const Diagnostic& warning : diagnostics.items()) {
        check_diagnostic(warning);
        FUZZ_CHECK(warning.where.file == "/etc/gpu-restriction.conf");
    }
    // Every gpu= rule matches a GPU built from it, so none is unmatched.
    FUZZ_CHECK(some == 0);

    // Comments and blank lines change nothing.
    std::string commented = "# gpu=0 group=x\n\n" + std::string(text);
    auto again = Policy::parse(commented, "/etc/gpu-restriction.conf");
    FUZZ_CHECK(again.ok());
    for (const GpuIdentity& gpu : gpus) {
        AccessRule a = policy->rule_for_gpu(gpu);
        AccessRule b = again->rule_for_gpu(gpu);
        FUZZ_CHECK(a.group == b.group && a.mode == b.mode && a.owner == b.owner);
    }
    return 0;
}
