// Stream-ordered allocation and memory pools.
//
// A pool keeps freed memory reserved, and gives it back only at
// synchronization points we never see, so a pool is charged what it holds
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not what is live in it. An
// allocation admits, before the real call, the part of the request the
// pool's free reserve cannot cover; afterwards the pool's charge is set to
// its new reserve (growth beyond the admitted part, from fragmentation, is
// charged without a cap check: the next admission sees it). Reserves are
// re-read at admissions (throttled to 250 ms, and always before a refusal),
// on trims, and before reporting.
#include "runtime.hpp"

#include <pthread.h>

using gpulimit::Allocation;
using gpulimit::DeviceInfo;
using gpulimit::Kind;
using gpulimit::Runtime;

namespace {

class PoolsLocked {
  public:
    explicit PoolsLocked(Runtime& runtime) : mutex_(runtime.pool_mutex) {
        pthread_mutex_lock(&mutex_);
    }
    ~PoolsLocked() { pthread_mutex_unlock(&mutex_); }
    PoolsLocked(const PoolsLocked&) = delete;
    PoolsLocked& operator=(const PoolsLocked&) = delete;

  private:
    pthread_mutex_t& mutex_;
};

bool pool_figure(CUmemoryPool pool, int attribute, uint64_t& value) {
    cuuint64_t figure = 0;
    if (pool == nullptr || gpulimit::real().cuMemPoolGetAttribute == nullptr ||
        gpulimit::real().cuMemPoolGetAttribute(pool, attribute, &figure) != CUDA_SUCCESS) {
        return false;
    }
    value = figure;
    return true;
}

// Sets the pool's charge to `reserved` (pool_mutex held).
void settle(Runtime& runtime, CUmemoryPool pool, int group_index, uint64_t reserved) {
    const auto key = reinterpret_cast<uint64_t>(pool);
    Allocation entry;
    if (!runtime.table.find(Kind::Pool, key, entry)) {
        entry = Allocation{group_index, 0};
    }
    if (reserved > entry.bytes) {
        runtime.state.charge_forced(entry.device, reserved - entry.bytes);
    } else if (reserved < entry.bytes) {
        runtime.state.uncharge(entry.device, entry.bytes - reserved);
    }
    entry.bytes = reserved;
    Allocation replaced;
    runtime.table.insert(Kind::Pool, key, entry, replaced);
}

template <typename RealAlloc>
CUresult pool_alloc(Runtime& runtime, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                    CUstream stream, bool per_thread, RealAlloc&& real_alloc) {
    DeviceInfo* device = nullptr;
    Allocation known;
    if (pool != nullptr &&
        runtime.table.find(Kind::Pool, reinterpret_cast<uint64_t>(pool), known)) {
        device = runtime.by_group_index(known.device);
    }
    if (device == nullptr) {
        device = runtime.of_stream(stream, per_thread);
    }
    if (device == nullptr || dptr == nullptr || bytesize == 0) {
        return real_alloc();
    }
    if (pool == nullptr) {
        CUmemoryPool current = nullptr;
        const auto get_pool = gpulimit::real().cuDeviceGetMemPool;
        if (get_pool != nullptr && get_pool(&current, device->handle) == CUDA_SUCCESS) {
            pool = current;
        }
    }
    const uint64_t bytes = device->round(bytesize);

    PoolsLocked lock(runtime);
    uint64_t reserved = 0;
    uint64_t used = 0;
    if (!pool_figure(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, reserved) ||
        !pool_figure(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, used)) {
        // A pool we cannot measure: count the allocation itself, freed by
        // cuMemFreeAsync like a linear one.
        if (!runtime.admit(*device, bytes, true)) {
            return gpulimit::kRefused;
        }
        const CUresult result = real_alloc();
        if (result != CUDA_SUCCESS) {
            runtime.release(*device, bytes);
            return result;
        }
        return gpulimit::remember(runtime, *device, Kind::Linear, *dptr, bytes,
                                  [&] { GPULIMIT_CALL_REAL(cuMemFreeAsync, *dptr, stream); });
    }
    settle(runtime, pool, device->group_index, reserved);
    const uint64_t spare = reserved > used ? reserved - used : 0;
    const uint64_t need = bytes > spare ? device->round(bytes - spare) : 0;
    if (need != 0 && !runtime.admit(*device, need, true)) {
        return gpulimit::kRefused;
    }
    Allocation entry;
    runtime.table.find(Kind::Pool, reinterpret_cast<uint64_t>(pool), entry);
    entry.bytes += need;
    runtime.table.update(Kind::Pool, reinterpret_cast<uint64_t>(pool), entry);

    const CUresult result = real_alloc();
    uint64_t after = 0;
    if (!pool_figure(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, after)) {
        after = result == CUDA_SUCCESS ? entry.bytes : entry.bytes - need;
    }
    settle(runtime, pool, device->group_index, after);
    return result;
}

// cuMemFreeAsync and its _ptsz variant (one ABI): self is the variant's.
CUresult free_async(gpulimit::hook::cuMemFreeAsync_fn self, CUdeviceptr dptr, CUstream stream) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const auto real_free = [&] { return GPULIMIT_CALL_SELF(dptr, stream); };
    if (runtime == nullptr || dptr == 0) {
        return real_free();
    }
    // Memory a pool gave out stays in its reserve (counted as the pool's);
    // only allocations counted one by one are in the table.
    return gpulimit::forget(*runtime, Kind::Linear, dptr, real_free);
}

} // namespace

CUresult gpulimit::hook::cuMemAllocAsync(cuMemAllocAsync_fn self, CUdeviceptr* dptr,
                                         size_t bytesize, CUstream hStream) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const auto real_alloc = [&] { return GPULIMIT_CALL_SELF(dptr, bytesize, hStream); };
    if (runtime == nullptr) {
        return real_alloc();
    }
    return pool_alloc(*runtime, dptr, bytesize, nullptr, hStream, false, real_alloc);
}

CUresult gpulimit::hook::cuMemAllocAsync_ptsz(cuMemAllocAsync_ptsz_fn self, CUdeviceptr* dptr,
                                              size_t bytesize, CUstream hStream) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const auto real_alloc = [&] { return GPULIMIT_CALL_SELF(dptr, bytesize, hStream); };
    if (runtime == nullptr) {
        return real_alloc();
    }
    return pool_alloc(*runtime, dptr, bytesize, nullptr, hStream, true, real_alloc);
}

CUresult gpulimit::hook::cuMemAllocFromPoolAsync(cuMemAllocFromPoolAsync_fn self, CUdeviceptr* dptr,
                                                 size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const auto real_alloc = [&] { return GPULIMIT_CALL_SELF(dptr, bytesize, pool, hStream); };
    if (runtime == nullptr || pool == nullptr) {
        return real_alloc();
    }
    return pool_alloc(*runtime, dptr, bytesize, pool, hStream, false, real_alloc);
}

CUresult gpulimit::hook::cuMemAllocFromPoolAsync_ptsz(cuMemAllocFromPoolAsync_ptsz_fn self,
                                                      CUdeviceptr* dptr, size_t bytesize,
                                                      CUmemoryPool pool, CUstream hStream) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const auto real_alloc = [&] { return GPULIMIT_CALL_SELF(dptr, bytesize, pool, hStream); };
    if (runtime == nullptr || pool == nullptr) {
        return real_alloc();
    }
    return pool_alloc(*runtime, dptr, bytesize, pool, hStream, true, real_alloc);
}

CUresult gpulimit::hook::cuMemFreeAsync(cuMemFreeAsync_fn self, CUdeviceptr dptr,
                                        CUstream hStream) {
    return free_async(self, dptr, hStream);
}

CUresult gpulimit::hook::cuMemFreeAsync_ptsz(cuMemFreeAsync_ptsz_fn self, CUdeviceptr dptr,
                                             CUstream hStream) {
    return free_async(self, dptr, hStream);
}

CUresult gpulimit::hook::cuMemPoolCreate(cuMemPoolCreate_fn self, CUmemoryPool* pool,
                                         const CUmemPoolProps* poolProps) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const CUresult result = GPULIMIT_CALL_SELF(pool, poolProps);
    if (runtime == nullptr || result != CUDA_SUCCESS || pool == nullptr || poolProps == nullptr ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        return result; // host pools hold no device memory
    }
    DeviceInfo* device = runtime->by_ordinal(poolProps->location.id);
    if (device != nullptr) {
        PoolsLocked lock(*runtime);
        settle(*runtime, *pool, device->group_index, 0);
    }
    return result;
}

CUresult gpulimit::hook::cuMemPoolDestroy(cuMemPoolDestroy_fn self, CUmemoryPool pool) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    if (runtime == nullptr || pool == nullptr) {
        return GPULIMIT_CALL_SELF(pool);
    }
    PoolsLocked lock(*runtime);
    return gpulimit::forget(*runtime, Kind::Pool, reinterpret_cast<uint64_t>(pool),
                            [&] { return GPULIMIT_CALL_SELF(pool); });
}

CUresult gpulimit::hook::cuMemPoolTrimTo(cuMemPoolTrimTo_fn self, CUmemoryPool pool,
                                         size_t minBytesToKeep) {
    Runtime* runtime = nullptr;
    if (const CUresult refused = gpulimit::enter(runtime); refused != CUDA_SUCCESS) {
        return refused;
    }
    const CUresult result = GPULIMIT_CALL_SELF(pool, minBytesToKeep);
    if (runtime != nullptr && result == CUDA_SUCCESS) {
        runtime->reconcile_pools(false);
    }
    return result;
}
