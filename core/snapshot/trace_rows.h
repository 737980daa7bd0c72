#pragma once
// Where a snapshot's trace entries become rows of its trace (internal to snapshot/).
#include "report/trace.h"
#include "snapshot/snapshot.h"
#include "support/second_thread.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace memledger::snapdecode {

// Where trace entries become rows of the trace (time_ns holding time_us until all are read). Rows wait in blocks
// of a few thousand; while the pickle is read, a second thread (where there is a core for it) puts full blocks
// into the trace's columns and the stream column, in order: those pushes and their fresh pages are up to a fifth
// of the reading. finish() puts in the rest and waits; the columns are read only after it. Meanwhile the reading
// thread keeps to the trace's strings and call stacks, which the second never touches.
class TraceRows {
public:
    TraceRows(Trace& t, StreamColumn& streams, TraceContextColumn& contexts)
        : trace(t)
        , streams_(streams)
        , contexts_(contexts)
    {
    }
    ~TraceRows() { stop(); } // after an error: the rows waiting are dropped
    TraceRows(const TraceRows&) = delete;
    TraceRows& operator=(const TraceRows&) = delete;

    Trace& trace; // its strings and stacks; its columns once finish() returns
    std::size_t untimed = 0; // rows without a time_us
    std::vector<bool> untimedRow; // which rows, filled from the first one on (a timed file holds none)

    std::size_t size() const { return size_; }
    std::uint32_t push(std::int64_t timeUs, bool timed, std::int64_t size, std::uint64_t addr, Action a,
        std::int8_t device, std::uint64_t stream, std::uint32_t stack, std::uint32_t where, TraceContext context)
    {
        const std::size_t i = size_++;
        if (current_.empty())
            current_.reserve(kBlock);
        current_.push_back({timed ? timeUs : 0, std::max<std::int64_t>(0, size), addr, stream, stack, where, a, device});
        if (context.user_metadata != 0 || context.compile_context != 0)
            contexts_.set(i, context);
        if (!timed) {
            ++untimed;
            untimedRow.resize(i + 1, false);
            untimedRow[i] = true;
        }
        if (current_.size() == kBlock || finished_)
            handOver();
        return static_cast<std::uint32_t>(i);
    }
    // Every row pushed so far is in the columns, and every row pushed from now on as it comes; the second
    // thread is gone. Throws what filling threw.
    void finish()
    {
        stop();
        finished_ = true;
        if (error_)
            std::rethrow_exception(std::exchange(error_, nullptr));
        fill(current_);
        current_.clear();
    }

private:
    struct Row {
        std::int64_t time;
        std::int64_t size;
        std::uint64_t addr;
        std::uint64_t stream;
        std::uint32_t stack;
        std::uint32_t where;
        Action action;
        std::int8_t device;
    };
    using Block = std::vector<Row>;
    static constexpr std::size_t kBlock = 4096, kMostWaiting = 16;

    void fill(const Block& rows)
    {
        for (const Row& r : rows) {
            const auto i = trace.push(r.time, r.size, r.addr, r.action, r.device);
            trace.where[i] = r.where;
            trace.stack[i] = r.stack;
            streams_.push_back(r.stream);
        }
    }
    // The current block to the second thread (started with the first full block), or into the columns here.
    void handOver()
    {
        if (!filler_.joinable() && !finished_ && !threadless_) {
            filler_ = secondThread([this] { run(); });
            threadless_ = !filler_.joinable(); // none to be had: filled here
        }
        if (!filler_.joinable()) {
            fill(current_);
            current_.clear();
            return;
        }
        std::unique_lock<std::mutex> lock(m_);
        changed_.wait(lock, [&] { return full_.size() < kMostWaiting || error_; });
        if (error_) { // filling failed: finish() says so; the rows are no longer kept
            current_.clear();
            return;
        }
        full_.push_back(std::move(current_));
        current_ = Block();
        if (!spare_.empty()) {
            current_ = std::move(spare_.back());
            spare_.pop_back();
        }
        changed_.notify_all();
    }
    void run()
    {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            changed_.wait(lock, [&] { return done_ || !full_.empty(); });
            if (full_.empty() || (done_ && dropping_))
                return;
            Block rows = std::move(full_.front());
            full_.pop_front();
            changed_.notify_all();
            lock.unlock();
            try {
                fill(rows);
            } catch (...) {
                lock.lock();
                error_ = std::current_exception();
                full_.clear();
                changed_.notify_all();
                return;
            }
            rows.clear();
            lock.lock();
            spare_.push_back(std::move(rows));
        }
    }
    // Lets the second thread fill what waits (or drops it, from the destructor) and waits for it to end.
    void stop()
    {
        if (!filler_.joinable())
            return;
        {
            std::lock_guard<std::mutex> lock(m_);
            done_ = true;
            dropping_ = std::uncaught_exceptions() > 0;
        }
        changed_.notify_all();
        filler_.join();
    }

    StreamColumn& streams_;
    TraceContextColumn& contexts_;
    std::size_t size_ = 0; // rows pushed
    Block current_;
    std::mutex m_;
    std::condition_variable changed_;
    std::deque<Block> full_; // waiting for the second thread, oldest first
    std::vector<Block> spare_; // emptied by it, to be filled again
    bool done_ = false, dropping_ = false; // guarded by m_
    bool finished_ = false, threadless_ = false;
    std::exception_ptr error_;
    std::thread filler_;
};

} // namespace memledger::snapdecode
