// What this process allocated, so that a free uncharges exactly what its
// allocation charged: pointer, VMM handle, array and pool -> (device, bytes).
//
// No operator new in the library: an open-addressing table in anonymous
// mmap'd memory that doubles when 3/4 full, under one process-local mutex (a
// process-local lock dies with its process, so it cannot block the group).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

namespace gpulimit {

// Handles of different kinds may share a value (a VMM handle and a device
// pointer are both 64-bit numbers): the kind is part of the key.
enum class Kind : uint32_t {
    Linear = 1, // cuMemAlloc*, cuMemAllocPitch*, cuMemAllocManaged
    Vmm,        // cuMemCreate handles
    Array,      // cuArrayCreate_v2, cuArray3DCreate_v2
    Mipmapped,  // cuMipmappedArrayCreate
    Pool,       // a memory pool this process allocated from
};

struct Allocation {
    int device = -1;    // index in the group state
    uint64_t bytes = 0; // charged to the device (for a pool: its reserve as last counted)
};

class AllocationTable {
  public:
    // False only when the table cannot grow (mmap failed). A handle already
    // present means we missed its free (a path we do not see): its entry is
    // replaced and the old one returned in `replaced` (bytes 0 otherwise) so
    // that the caller can uncharge it.
    bool insert(Kind kind, uint64_t handle, Allocation allocation, Allocation& replaced);
    // Removes and returns the entry; false when the handle is unknown.
    bool take(Kind kind, uint64_t handle, Allocation& allocation);
    bool find(Kind kind, uint64_t handle, Allocation& allocation);
    // Replaces an existing entry's figure (pools); false when unknown.
    bool update(Kind kind, uint64_t handle, Allocation allocation);

    // Calls visit(handle, allocation&) for every entry of a kind, under the
    // table's lock; visit may change allocation.bytes.
    template <typename Visit>
    void for_each(Kind kind, Visit&& visit) {
        pthread_mutex_lock(&mutex_);
        for (size_t i = 0; i < capacity_; ++i) {
            if (slots_[i].kind == kind) {
                visit(slots_[i].handle, slots_[i].allocation);
            }
        }
        pthread_mutex_unlock(&mutex_);
    }

    // Without the lock: a hint for fast paths ("any pool known?").
    size_t count(Kind kind) const {
        return per_kind_[static_cast<uint32_t>(kind) & 7].load(std::memory_order_relaxed);
    }

    // In a fork child: the parent's allocations are not the child's (and the
    // mutex may have been held by a thread that does not exist here).
    void reset_after_fork();

  private:
    struct Slot {
        uint64_t handle;
        Kind kind; // 0: empty
        uint32_t pad;
        Allocation allocation;
    };

    size_t index_of(Kind kind, uint64_t handle) const; // capacity_ when absent
    bool grow();
    void erase_at(size_t index);

    pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
    Slot* slots_ = nullptr;
    size_t capacity_ = 0; // a power of two, or 0
    size_t used_ = 0;
    std::atomic<size_t> per_kind_[8] = {};
};

} // namespace gpulimit
