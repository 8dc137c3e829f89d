#include "allocations.hpp"

#include <sys/mman.h>

namespace gpulimit {
namespace {

constexpr size_t kInitialCapacity = 1024;

size_t hash(gpulimit::Kind kind, uint64_t handle) {
    // splitmix64's finalizer: device pointers share their low bits (2 MiB
    // alignment), so they must be mixed before masking.
    uint64_t x = handle ^ (static_cast<uint64_t>(kind) << 56);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return static_cast<size_t>(x);
}

template <typename T>
T* map_zeroed(size_t count) {
    void* memory = mmap(nullptr, count * sizeof(T), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return memory == MAP_FAILED ? nullptr : static_cast<T*>(memory);
}

class Locked {
  public:
    explicit Locked(pthread_mutex_t& mutex) : mutex_(mutex) { pthread_mutex_lock(&mutex_); }
    ~Locked() { pthread_mutex_unlock(&mutex_); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

  private:
    pthread_mutex_t& mutex_;
};

} // namespace

size_t AllocationTable::index_of(Kind kind, uint64_t handle) const {
    if (capacity_ == 0) {
        return capacity_;
    }
    const size_t mask = capacity_ - 1;
    for (size_t i = hash(kind, handle) & mask;; i = (i + 1) & mask) {
        const Slot& slot = slots_[i];
        if (slot.kind == Kind{}) {
            return capacity_;
        }
        if (slot.kind == kind && slot.handle == handle) {
            return i;
        }
    }
}

bool AllocationTable::grow() {
    const size_t capacity = capacity_ == 0 ? kInitialCapacity : capacity_ * 2;
    Slot* slots = map_zeroed<Slot>(capacity);
    if (slots == nullptr) {
        return false;
    }
    const size_t mask = capacity - 1;
    for (size_t i = 0; i < capacity_; ++i) {
        if (slots_[i].kind == Kind{}) {
            continue;
        }
        size_t j = hash(slots_[i].kind, slots_[i].handle) & mask;
        while (slots[j].kind != Kind{}) {
            j = (j + 1) & mask;
        }
        slots[j] = slots_[i];
    }
    if (slots_ != nullptr) {
        munmap(slots_, capacity_ * sizeof(Slot));
    }
    slots_ = slots;
    capacity_ = capacity;
    return true;
}

// Linear probing with backward-shift deletion: no tombstones, so lookups of
// absent handles (frees of memory we never saw) stay short.
void AllocationTable::erase_at(size_t index) {
    const size_t mask = capacity_ - 1;
    size_t hole = index;
    for (size_t i = (index + 1) & mask; slots_[i].kind != Kind{}; i = (i + 1) & mask) {
        const size_t home = hash(slots_[i].kind, slots_[i].handle) & mask;
        // Move slot i into the hole unless its home lies cyclically in (hole, i].
        const bool home_after_hole =
            hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!home_after_hole) {
            slots_[hole] = slots_[i];
            hole = i;
        }
    }
    slots_[hole] = Slot{};
    --used_;
}

bool AllocationTable::insert(Kind kind, uint64_t handle, Allocation allocation,
                             Allocation& replaced) {
    Locked lock(mutex_);
    replaced = Allocation{};
    size_t index = index_of(kind, handle);
    if (index != capacity_) {
        replaced = slots_[index].allocation;
        slots_[index].allocation = allocation;
        return true;
    }
    if ((used_ + 1) * 4 > capacity_ * 3 && !grow()) {
        return false;
    }
    const size_t mask = capacity_ - 1;
    index = hash(kind, handle) & mask;
    while (slots_[index].kind != Kind{}) {
        index = (index + 1) & mask;
    }
    slots_[index] = Slot{handle, kind, 0, allocation};
    ++used_;
    ++per_kind_[static_cast<uint32_t>(kind) & 7];
    return true;
}

bool AllocationTable::take(Kind kind, uint64_t handle, Allocation& allocation) {
    Locked lock(mutex_);
    const size_t index = index_of(kind, handle);
    if (index == capacity_) {
        return false;
    }
    allocation = slots_[index].allocation;
    erase_at(index);
    --per_kind_[static_cast<uint32_t>(kind) & 7];
    return true;
}

bool AllocationTable::find(Kind kind, uint64_t handle, Allocation& allocation) {
    Locked lock(mutex_);
    const size_t index = index_of(kind, handle);
    if (index == capacity_) {
        return false;
    }
    allocation = slots_[index].allocation;
    return true;
}

bool AllocationTable::update(Kind kind, uint64_t handle, Allocation allocation) {
    Locked lock(mutex_);
    const size_t index = index_of(kind, handle);
    if (index == capacity_) {
        return false;
    }
    slots_[index].allocation = allocation;
    return true;
}

void AllocationTable::reset_after_fork() {
    pthread_mutex_init(&mutex_, nullptr);
    if (slots_ != nullptr) {
        munmap(slots_, capacity_ * sizeof(Slot));
    }
    slots_ = nullptr;
    capacity_ = 0;
    used_ = 0;
    for (auto& n : per_kind_) {
        n.store(0, std::memory_order_relaxed);
    }
}

} // namespace gpulimit
