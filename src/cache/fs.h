// POSIX file-system helpers of the disk cache (internal to src/cache): descriptors that close
// themselves, EINTR-safe open/read/write, directory checks and creation, and the clock the cache
// stamps files with. Every directory the cache reads from or writes to passes the same check
// (not a symlink, owned by the current user, not writable by others unless a group-shared cache was
// asked for), and files are opened with O_NOFOLLOW, relative to a checked directory where it matters.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ssd::cache {

// strerror-like text of an errno value.
std::string errno_text(int e);

// Wall-clock time (CLOCK_REALTIME): the cache compares it with file modification times.
int64_t now_ns();
int64_t now_unix();

std::string join(const std::string& a, const std::string& b);  // a + "/" + b

// Absolute, without trailing slashes (lstat("dir/") would follow a symlink).
std::string normalize_root(std::string p);

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// open(2), retried on EINTR.
int open_retry(const char* path, int flags, mode_t mode = 0);

// Returns 0 or an errno value.
int write_all(int fd, const void* data, size_t size);

// Returns 0, an errno value, or -1 when the file ended early.
int pread_all(int fd, void* data, size_t size, off_t offset);

// Best effort: makes a rename or link inside `dir` durable.
void fsync_dir(const std::string& dir);

// Why a directory with this lstat/fstat result is not acceptable in the cache ("" when it is).
std::string stat_dir_problem(const struct stat& st, bool group_shared);

// Why `path` is not acceptable as a cache directory ("" when it is).
std::string dir_problem(const std::string& path, bool group_shared);

// Opens the directory `path` for reading files relative to it, if it passes the checks store()
// applies when it creates one (not a symlink, ours, not writable by others). On failure returns -1
// and sets *problem to the reason, or leaves it empty when the directory does not exist or cannot
// be opened (a miss, not a reason to distrust it).
int open_checked_dir(const std::string& path, bool group_shared, std::string* problem);

// Names in a directory opened with open_checked_dir (takes ownership of `fd`).
std::vector<std::string> names_in(int fd);

// mkdir + check. Returns "" or the reason the directory cannot be used.
std::string ensure_dir(const std::string& path, mode_t mode, bool group_shared);

// mkdir -p for the parents of `path` (mode 0700 for the ones we create). Errors surface later.
void make_parents(const std::string& path);

// The first bytes (at most 128) of a small file, not following a symlink. False when it cannot be
// opened or read.
bool read_small_file(const std::string& path, std::string* out);

}  // namespace ssd::cache
