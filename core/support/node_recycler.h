#pragma once
// A memory resource for node containers (std::pmr::set, unordered_map) that churn: freed nodes go on a
// free list per size and are handed out again, so an insert or erase never reaches malloc. Memory is
// returned when the resource is destroyed. Internal to core.
#include <cstddef>
#include <memory_resource>
#include <vector>

namespace memledger {

class NodeRecycler : public std::pmr::memory_resource {
private:
    static constexpr std::size_t kMaxNode = 256; // larger requests (bucket arrays) go upstream

    void* do_allocate(std::size_t bytes, std::size_t align) override
    {
        if (bytes > kMaxNode || align > alignof(std::max_align_t))
            return upstream_.allocate(bytes, align);
        std::size_t slot = (bytes + 15) / 16;
        if (void* p = free_[slot]) {
            free_[slot] = *static_cast<void**>(p);
            return p;
        }
        return arena_.allocate(slot * 16, 16);
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t align) override
    {
        if (bytes > kMaxNode || align > alignof(std::max_align_t)) {
            upstream_.deallocate(p, bytes, align);
            return;
        }
        std::size_t slot = (bytes + 15) / 16;
        *static_cast<void**>(p) = free_[slot];
        free_[slot] = p;
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

    std::pmr::monotonic_buffer_resource arena_ {std::size_t {1} << 16};
    std::pmr::memory_resource& upstream_ = *std::pmr::new_delete_resource();
    void* free_[kMaxNode / 16 + 1] = {};
};

} // namespace memledger
