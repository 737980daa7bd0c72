#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace memledger {

// Writes to PATH.tmp-XXXX then renames over PATH, so a failed write never leaves half a file.
// Throws std::runtime_error naming the path and the reason.
void writeFileAtomically(const std::string& path, const std::string& contents);

// The same, written in pieces: write() as often as needed, then commit() renames the file into place. A writer
// destroyed without commit() (an exception on the way) removes what it wrote.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(const std::string& path); // throws std::runtime_error
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
    void write(const char* data, std::size_t n); // throws std::runtime_error
    void commit(); // throws std::runtime_error

private:
    std::string path_, tmp_;
    std::FILE* file_ = nullptr;
};
std::string readWholeFile(const std::string& path); // throws FileError

// A file opened for reading in pieces. The constructor names the problem (missing, a directory, cannot be
// opened) in a FileError; size() is the size it had when opened; read() returns 0 at the end and throws a
// FileError on a read error. Reading in pieces rather than mapping the file: another program truncating it
// meanwhile makes the data end early, never a crash.
class FileReader {
public:
    explicit FileReader(const std::string& path);
    ~FileReader();
    FileReader(const FileReader&) = delete;
    FileReader& operator=(const FileReader&) = delete;
    std::size_t size() const { return size_; }
    std::size_t read(char* dst, std::size_t n);
    const std::string& path() const { return path_; }

private:
    std::string path_;
    int fd_ = -1;
    std::size_t size_ = 0;
};

} // namespace memledger
