// Error handling across the libgpuinit boundary: no exceptions, a value or an
// Error that carries errno (0 when the failure is not an OS error) and a
// one-line message meant for the admin.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace gpuinit {

struct Error {
    int code = 0;
    std::string message;
};

// Builds "what: strerror(code)".
Error os_error(int code, std::string_view what);
// Same, from the current errno.
Error errno_error(std::string_view what);

template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : value_(std::move(value)) {}
    Result(Error error) : error_(std::move(error)) {}

    bool ok() const { return value_.has_value(); }
    explicit operator bool() const { return ok(); }

    T& value() & { return *value_; }
    const T& value() const& { return *value_; }
    T&& value() && { return std::move(*value_); }
    T* operator->() { return &*value_; }
    const T* operator->() const { return &*value_; }
    T& operator*() & { return *value_; }
    const T& operator*() const& { return *value_; }

    const Error& error() const { return error_; }

  private:
    std::optional<T> value_;
    Error error_;
};

template <>
class [[nodiscard]] Result<void> {
  public:
    Result() = default;
    Result(Error error) : error_(std::move(error)), failed_(true) {}

    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const Error& error() const { return error_; }

  private:
    Error error_;
    bool failed_ = false;
};

using Status = Result<void>;

} // namespace gpuinit
