#include "gpuinit/persist/control.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_information.hpp"

#include <algorithm>
#include <cerrno>

namespace gpuinit {

namespace {

constexpr std::string_view kReplyMagic = "gpu-persist-reply 1";

// A field may not carry the separators.
std::string field(std::string_view text) {
    std::string out(text);
    std::replace_if(
        out.begin(), out.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
    return out.empty() ? "-" : out;
}

std::vector<std::string_view> split_tabs(std::string_view line) {
    std::vector<std::string_view> fields;
    size_t start = 0;
    while (true) {
        size_t tab = line.find('\t', start);
        fields.push_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
        if (tab == std::string_view::npos) {
            return fields;
        }
        start = tab + 1;
    }
}

std::optional<HoldState> parse_hold_state(std::string_view name) {
    for (HoldState state :
         {HoldState::Opening, HoldState::Held, HoldState::Failed, HoldState::WaitingForNode,
          HoldState::Disabled, HoldState::Lost, HoldState::Unbinding}) {
        if (name == hold_state_name(state)) {
            return state;
        }
    }
    return std::nullopt;
}

Diagnostic bad_reply(size_t line, std::string_view why) {
    return error(format("gpu-persist's reply, line %zu: %s; is the daemon the same version as "
                        "this client?",
                        line, std::string(why).c_str()),
                 EPROTO);
}

std::optional<bool> yes_no(std::string_view text) {
    if (text == "yes") {
        return true;
    }
    if (text == "no") {
        return false;
    }
    return std::nullopt;
}

} // namespace

Result<ControlRequest> parse_control_request(std::string_view line) {
    if (line.size() > kMaxControlRequest) {
        return error("request too long", EMSGSIZE);
    }
    if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
    }
    auto words = split_words(line);
    ControlRequest request;
    if (words.size() == 1 && words[0] == "status") {
        return request;
    }
    if (words.size() != 2 || (words[0] != "enable" && words[0] != "disable")) {
        return error("unknown request " + quote(line) +
                         ": expected status, enable GPU|all or disable GPU|all",
                     EINVAL);
    }
    request.kind =
        words[0] == "enable" ? ControlRequest::Kind::Enable : ControlRequest::Kind::Disable;
    if (words[1] != "all") {
        auto selector = GpuSelector::parse(words[1]);
        if (!selector) {
            return selector.error();
        }
        request.gpu = std::move(*selector);
    }
    return request;
}

std::string format_control_request(const ControlRequest& request) {
    switch (request.kind) {
    case ControlRequest::Kind::Query:
        return "status\n";
    case ControlRequest::Kind::Enable:
    case ControlRequest::Kind::Disable:
        return std::string(request.kind == ControlRequest::Kind::Enable ? "enable " : "disable ") +
               (request.gpu ? request.gpu->text() : std::string("all")) + "\n";
    }
    return "status\n";
}

bool peer_may_change(const PeerCredentials& peer, std::optional<gid_t> admin_group) {
    if (peer.uid == 0) {
        return true;
    }
    if (!admin_group) {
        return false;
    }
    return peer.gid == *admin_group ||
           std::find(peer.groups.begin(), peer.groups.end(), *admin_group) != peer.groups.end();
}

std::string format_control_reply(const ControlReply& reply) {
    std::string out(kReplyMagic);
    out += "\n";
    out += format("result\t%d\t", reply.code) + field(reply.message) + "\n";
    const DaemonInfo& d = reply.daemon;
    out += format("daemon\t%d\t%u\t%s\t", static_cast<int>(d.pid), static_cast<unsigned>(d.uid),
                  d.runs_as_root ? "yes" : "no") +
           field(d.compat) + "\t" + field(d.hotplug) + "\n";
    for (const HeldGpu& gpu : reply.gpus) {
        out += format("gpu\t%u\t", gpu.id.minor) + field(gpu.id.bdf) + "\t" + field(gpu.id.uuid) +
               "\t" + hold_state_name(gpu.state) + "\t" + (gpu.wanted ? "yes" : "no") + "\t" +
               format("%d\t", gpu.error_code) + field(gpu.error) + "\n";
    }
    out += "end\n";
    return out;
}

Result<ControlReply> parse_control_reply(std::string_view text) {
    if (text.size() > kMaxControlReply) {
        return error("gpu-persist's reply is too long", EMSGSIZE);
    }
    auto lines = split_lines(text);
    if (lines.empty() || lines[0] != kReplyMagic) {
        return bad_reply(1, "not a gpu-persist reply");
    }
    ControlReply reply;
    bool have_result = false;
    bool have_daemon = false;
    for (size_t i = 1; i < lines.size(); ++i) {
        auto fields = split_tabs(lines[i]);
        std::string_view kind = fields[0];
        if (kind == "end" && fields.size() == 1) {
            if (!have_result || !have_daemon) {
                return bad_reply(i + 1, "result or daemon line missing");
            }
            return reply;
        }
        if (kind == "result" && fields.size() == 3) {
            auto code = parse_decimal(fields[1], 4095);
            if (!code) {
                return bad_reply(i + 1, "bad result code");
            }
            reply.code = static_cast<int>(*code);
            reply.message = fields[2] == "-" ? std::string() : std::string(fields[2]);
            have_result = true;
        } else if (kind == "daemon" && fields.size() == 6) {
            auto pid = parse_decimal(fields[1], 0x7fffffff);
            auto uid = parse_decimal(fields[2], 0xffffffffU);
            auto root = yes_no(fields[3]);
            if (!pid || !uid || !root) {
                return bad_reply(i + 1, "bad daemon line");
            }
            reply.daemon = {static_cast<pid_t>(*pid), static_cast<uid_t>(*uid), *root,
                            std::string(fields[4]), std::string(fields[5])};
            have_daemon = true;
        } else if (kind == "gpu" && fields.size() == 8) {
            auto minor = parse_decimal(fields[1], kMaxGpuMinor);
            auto state = parse_hold_state(fields[4]);
            auto wanted = yes_no(fields[5]);
            auto code = parse_decimal(fields[6], 4095);
            if (!minor || !state || !wanted || !code || reply.gpus.size() > kMaxGpuMinor) {
                return bad_reply(i + 1, "bad gpu line");
            }
            HeldGpu gpu;
            gpu.id = {static_cast<unsigned>(*minor), std::string(fields[2]),
                      fields[3] == "-" ? std::string() : std::string(fields[3])};
            gpu.state = *state;
            gpu.wanted = *wanted;
            gpu.error_code = static_cast<int>(*code);
            gpu.error = fields[7] == "-" ? std::string() : std::string(fields[7]);
            reply.gpus.push_back(std::move(gpu));
        } else {
            return bad_reply(i + 1, "unknown line");
        }
    }
    return bad_reply(lines.size(), "no end line (the daemon stopped while answering?)");
}

} // namespace gpuinit
