// The registration datagram (daemon_protocol.hpp). Freestanding: linked into
// libgpulimit.so (the sender) and into gpu-limit (the daemon).
#include "gpuinit/limit/daemon_protocol.hpp"

#include "gpuinit/limit/group_state.hpp"

#include <cstring>

namespace gpuinit::limit {

namespace {

constexpr char kPrefix[] = "GPULIMIT2 REGISTER ";
constexpr char kOldPrefix[] = "GPULIMIT1 ";
constexpr size_t kPrefixLength = sizeof kPrefix - 1;

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

} // namespace

bool is_group_name(const char* name, size_t length) {
    if (length == 0 || length > kGroupNameSize - 1) {
        return false;
    }
    for (size_t i = 0; i < length; ++i) {
        if (!name_char(name[i])) {
            return false;
        }
    }
    return !(length == 1 && name[0] == '.') && !(length == 2 && name[0] == '.' && name[1] == '.');
}

bool parse_register_request(const char* data, size_t size, RegisterRequest& request,
                            const char*& reason) {
    request = RegisterRequest{};
    if (data == nullptr || size == 0) {
        reason = "empty-request";
        return false;
    }
    if (size >= kDaemonMaxMessage) {
        reason = "request-too-long";
        return false;
    }
    if (size >= sizeof kOldPrefix - 1 &&
        std::memcmp(data, kOldPrefix, sizeof kOldPrefix - 1) == 0) {
        reason = "old-protocol";
        return false;
    }
    if (size < kPrefixLength || std::memcmp(data, kPrefix, kPrefixLength) != 0) {
        reason = "unknown-request";
        return false;
    }
    if (data[size - 1] != '\n') {
        reason = "no-final-newline";
        return false;
    }
    // <group> <slot>, between the prefix and the newline.
    const char* fields = data + kPrefixLength;
    size_t length = size - kPrefixLength - 1;
    const void* space = std::memchr(fields, ' ', length);
    if (space == nullptr) {
        reason = "expected-group-and-slot";
        return false;
    }
    size_t group_length = static_cast<size_t>(static_cast<const char*>(space) - fields);
    if (!is_group_name(fields, group_length)) {
        reason = "bad-group-name";
        return false;
    }
    const char* digits = fields + group_length + 1;
    size_t digit_count = length - group_length - 1;
    if (digit_count == 0 || digit_count > 4 || (digit_count > 1 && digits[0] == '0')) {
        reason = "bad-slot";
        return false;
    }
    int slot = 0;
    for (size_t i = 0; i < digit_count; ++i) {
        if (digits[i] < '0' || digits[i] > '9') {
            reason = "bad-slot";
            return false;
        }
        slot = slot * 10 + (digits[i] - '0');
    }
    if (slot >= kMaxSlots) {
        reason = "slot-out-of-range";
        return false;
    }
    std::memcpy(request.group, fields, group_length);
    request.group[group_length] = '\0';
    request.slot = slot;
    return true;
}

size_t format_register_request(const char* group, int slot, char* buffer, size_t size) {
    if (group == nullptr || buffer == nullptr || slot < 0 || slot >= kMaxSlots) {
        return 0;
    }
    size_t group_length = std::strlen(group);
    if (!is_group_name(group, group_length)) {
        return 0;
    }
    char digits[8];
    size_t digit_count = 0;
    do {
        digits[digit_count++] = static_cast<char>('0' + slot % 10);
        slot /= 10;
    } while (slot > 0);
    size_t total = kPrefixLength + group_length + 1 + digit_count + 1;
    if (total > size || total >= kDaemonMaxMessage) {
        return 0;
    }
    char* out = buffer;
    std::memcpy(out, kPrefix, kPrefixLength);
    out += kPrefixLength;
    // The request is a datagram with a length, not a C string: no NUL.
    std::memcpy(out, group, group_length); // NOLINT(bugprone-not-null-terminated-result)
    out += group_length;
    *out++ = ' ';
    while (digit_count > 0) {
        *out++ = digits[--digit_count];
    }
    *out++ = '\n';
    return total;
}

} // namespace gpuinit::limit
