// The SIGBUS guard: see sigbus_guard.hpp. The handler uses only atomics,
// mmap and sigaction (system calls), and keeps errno.
#include "gpuinit/limit/sigbus_guard.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <sys/mman.h>

namespace gpuinit::limit::sigbus_guard {

namespace {

struct Entry {
    std::atomic<void*> base{nullptr}; // nullptr: not (yet) a range
    std::atomic<size_t> length{0};
    std::atomic<bool> used{false};
    std::atomic<bool> poisoned{false};
};
static_assert(std::atomic<void*>::is_always_lock_free && std::atomic<size_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "the handler reads the registry: its atomics must be lock-free");

Entry g_entries[kMaxGuarded];
std::atomic<bool> g_installed{false};
struct sigaction g_previous {};

void chain(int signal, siginfo_t* info, void* context) {
    if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
        g_previous.sa_sigaction(signal, info, context);
        return;
    }
    if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
        // A fault cannot be ignored: the default action, by the fault
        // happening again once this handler returns (or, for a SIGBUS sent
        // by kill, by the next one).
        struct sigaction fallback {};
        fallback.sa_handler = SIG_DFL;
        sigemptyset(&fallback.sa_mask);
        ::sigaction(SIGBUS, &fallback, nullptr);
        if (info == nullptr || info->si_code <= 0) {
            ::raise(SIGBUS); // not a fault: nothing happens again by itself
        }
        return;
    }
    g_previous.sa_handler(signal);
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
    int saved = errno;
    if (info != nullptr && info->si_code == BUS_ADRERR) {
        auto address = reinterpret_cast<uintptr_t>(info->si_addr);
        for (Entry& entry : g_entries) {
            void* base = entry.base.load(std::memory_order_acquire);
            size_t length = entry.length.load(std::memory_order_relaxed);
            auto start = reinterpret_cast<uintptr_t>(base);
            if (base == nullptr || address < start || address - start >= length) {
                continue;
            }
            void* zeros = ::mmap(base, length, PROT_READ | PROT_WRITE,
                                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (zeros == MAP_FAILED) {
                break; // no memory: die as without the guard
            }
            entry.poisoned.store(true, std::memory_order_release);
            errno = saved;
            return; // the access retries on zeros
        }
    }
    chain(signal, info, context);
    errno = saved;
}

} // namespace

bool install() {
    if (g_installed.exchange(true)) {
        return true;
    }
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (::sigaction(SIGBUS, &action, &g_previous) != 0) {
        g_installed.store(false);
        return false;
    }
    return true;
}

int guard(void* base, size_t length) {
    if (base == nullptr || length == 0) {
        return -1;
    }
    for (int handle = 0; handle < kMaxGuarded; ++handle) {
        Entry& entry = g_entries[handle];
        bool expected = false;
        if (!entry.used.compare_exchange_strong(expected, true)) {
            continue;
        }
        entry.poisoned.store(false, std::memory_order_relaxed);
        entry.length.store(length, std::memory_order_relaxed);
        entry.base.store(base, std::memory_order_release);
        return handle;
    }
    return -1;
}

void unguard(int handle) {
    if (handle < 0 || handle >= kMaxGuarded) {
        return;
    }
    Entry& entry = g_entries[handle];
    entry.base.store(nullptr, std::memory_order_release);
    entry.length.store(0, std::memory_order_relaxed);
    entry.poisoned.store(false, std::memory_order_relaxed);
    entry.used.store(false, std::memory_order_release);
}

bool poisoned(int handle) {
    return handle >= 0 && handle < kMaxGuarded &&
           g_entries[handle].poisoned.load(std::memory_order_acquire);
}

} // namespace gpuinit::limit::sigbus_guard
