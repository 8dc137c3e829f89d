// Negative test of check-abi.sh: a std::string inside the interposer pulls
// operator new (and with it the exception machinery) out of libstdc++.a.
#include <cstddef>
#include <string>

__attribute__((visibility("hidden"))) std::size_t gpulimit_abi_bad_length(const char* text) {
    const std::string copy(text);
    return copy.size();
}
