#pragma once
#include <stdexcept>
#include <string>

namespace memledger {

// The model or snapshot file cannot be read: missing, not TorchScript, truncated... (CLI exit code 3)
class FileError : public std::runtime_error {
public:
    FileError(const std::string& path, const std::string& reason)
        : std::runtime_error(path + ": " + reason)
        , path_(path)
        , reason_(reason)
    {
    }
    const std::string& path() const { return path_; }
    const std::string& reason() const { return reason_; }

private:
    std::string path_;
    std::string reason_;
};

// The file was read but running it failed: bad input shape, missing kernel for a dtype. (exit code 4)
class RunError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The run was asked for what the model cannot take: as many inputs as its forward does not (exit code 2, the
// usage error's: the command line is wrong, not the model).
class UsageError : public RunError {
public:
    using RunError::RunError;
};

// The run was cancelled by the user.
class Cancelled : public std::runtime_error {
public:
    Cancelled()
        : std::runtime_error("cancelled")
    {
    }
};

} // namespace memledger
