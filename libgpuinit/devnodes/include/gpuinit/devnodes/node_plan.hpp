// Pure planning: given the machine and the policy, which nodes and links
// should exist under /dev. No filesystem effects; that split is what makes
// --dry-run, --json and the tests cheap.
#pragma once

#include "gpuinit/host/accounts.hpp"
#include "gpuinit/host/machine.hpp"
#include "gpuinit/host/policy.hpp"

#include <string>
#include <sys/types.h>
#include <vector>

namespace gpuinit {

struct NodeSpec {
    std::string name; // relative to /dev: "nvidia0", "nvidiactl"
    unsigned major = 0;
    unsigned minor = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    unsigned mode = 0;
    std::string owner; // names, for people
    std::string group;
    std::string subject; // "GPU 0 (0000:17:00.0)" or "control"
    std::string origin;  // the policy line, or "built-in default"
};

struct LinkSpec {
    std::string name;   // relative to /dev: "char/195:0"
    std::string target; // "../nvidia0"
};

struct Problem {
    enum class Severity { Warning, Error };
    Severity severity = Severity::Warning;
    std::string message;
};

struct NodePlan {
    std::vector<NodeSpec> nodes;
    std::vector<LinkSpec> links;
    std::vector<Problem> problems;

    bool has_errors() const;
};

struct PlanRequest {
    enum class Scope { All, Device, Control };
    Scope scope = Scope::All;
    std::string device; // with Scope::Device: a minor or a PCI address
};

NodePlan plan_nodes(const Machine& machine, const Policy& policy, const AccountDb& accounts,
                    const PlanRequest& request);

// "/dev/char/195:0" style link name for a node.
std::string char_link_name(unsigned major, unsigned minor);

} // namespace gpuinit
