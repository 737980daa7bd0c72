#pragma once
// Work handed to a second thread where the machine has a second core and a thread can be started. Internal
// to core.
#include <system_error>
#include <thread>
#include <utility>

namespace memledger {

// A thread running `work`, or none (not joinable) on a one-core machine or when no thread can be started:
// the caller then does the work itself.
template <class Work> std::thread secondThread(Work&& work)
{
    if (std::thread::hardware_concurrency() < 2)
        return {};
    try {
        return std::thread(std::forward<Work>(work));
    } catch (const std::system_error&) {
        return {};
    }
}

} // namespace memledger
