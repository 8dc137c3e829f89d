#include "gpuinit/base/result.hpp"

#include <cerrno>
#include <cstring>

namespace gpuinit {

Error os_error(int code, std::string_view what) {
    std::string message(what);
    message += ": ";
    message += std::strerror(code);
    return Error{code, std::move(message)};
}

Error errno_error(std::string_view what) {
    return os_error(errno, what);
}

} // namespace gpuinit
