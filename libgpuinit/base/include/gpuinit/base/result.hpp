// Error handling across the libgpuinit boundary: no exceptions, a value or a
// Diagnostic (diag.hpp) that says what failed and how to fix it.
#pragma once

#include "gpuinit/base/diag.hpp"

#include <optional>
#include <utility>

namespace gpuinit {

template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : value_(std::move(value)) {}
    Result(Diagnostic error) : error_(std::move(error)) {}

    bool ok() const { return value_.has_value(); }
    explicit operator bool() const { return ok(); }

    T& value() & { return *value_; }
    const T& value() const& { return *value_; }
    T&& value() && { return std::move(*value_); }
    T* operator->() { return &*value_; }
    const T* operator->() const { return &*value_; }
    T& operator*() & { return *value_; }
    const T& operator*() const& { return *value_; }

    T value_or(T fallback) const& { return value_ ? *value_ : std::move(fallback); }

    const Diagnostic& error() const { return error_; }

  private:
    std::optional<T> value_;
    Diagnostic error_;
};

template <>
class [[nodiscard]] Result<void> {
  public:
    Result() = default;
    Result(Diagnostic error) : error_(std::move(error)), failed_(true) {}

    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const Diagnostic& error() const { return error_; }

  private:
    Diagnostic error_;
    bool failed_ = false;
};

using Status = Result<void>;

} // namespace gpuinit
