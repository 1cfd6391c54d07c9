// POSIX file-system helpers of the disk cache (fs.h).
#include "cache/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace ssd::cache {

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000ll + ts.tv_nsec;
}

int64_t now_unix() { return now_ns() / 1000000000ll; }

std::string join(const std::string& a, const std::string& b) { return a + "/" + b; }

std::string normalize_root(std::string p) {
  if (p.empty()) return p;
  if (p[0] != '/') {
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    if (!ec) p = cwd.string() + "/" + p;
  }
  p = std::filesystem::path(p).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

int open_retry(const char* path, int flags, mode_t mode) {
  int fd;
  do fd = ::open(path, flags, mode);
  while (fd < 0 && errno == EINTR);
  return fd;
}

int write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= size_t(n);
  }
  return 0;
}

int pread_all(int fd, void* data, size_t size, off_t offset) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return -1;
    p += n;
    size -= size_t(n);
    offset += n;
  }
  return 0;
}

void fsync_dir(const std::string& dir) {
  int fd = open_retry(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);  // best effort: some file systems refuse fsync on directories
  ::close(fd);
}

std::string stat_dir_problem(const struct stat& st, bool group_shared) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("is owned by uid {}, not by the current user (uid {})", unsigned(st.st_uid),
                       unsigned(::geteuid()));
  if (st.st_mode & S_IWOTH) return "is world-writable";
  if ((st.st_mode & S_IWGRP) && !group_shared)
    return "is group-writable (SSD_CACHE_SHARED=1 accepts a group-shared cache)";
  return "";
}

std::string dir_problem(const std::string& path, bool group_shared) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("cannot be examined ({})", errno_text(errno));
  return stat_dir_problem(st, group_shared);
}

int open_checked_dir(const std::string& path, bool group_shared, std::string* problem) {
  problem->clear();
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int e = errno;
    struct stat st {};
    if ((e == ELOOP || e == ENOTDIR) && ::lstat(path.c_str(), &st) == 0) *problem = stat_dir_problem(st, group_shared);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return -1;
  }
  *problem = stat_dir_problem(st, group_shared);
  if (!problem->empty()) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<std::string> names_in(int fd) {
  std::vector<std::string> names;
  DIR* dir = ::fdopendir(fd);
  if (!dir) {
    ::close(fd);
    return names;
  }
  while (dirent* d = ::readdir(dir)) names.push_back(d->d_name);
  ::closedir(dir);
  return names;
}

std::string ensure_dir(const std::string& path, mode_t mode, bool group_shared) {
  if (::mkdir(path.c_str(), mode) == 0) {
    if (group_shared) (void)::chmod(path.c_str(), mode);  // the umask may have removed group bits
    return "";
  }
  if (errno != EEXIST) return fmt::format("cannot be created ({})", errno_text(errno));
  return dir_problem(path, group_shared);
}

void make_parents(const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return;
  }
}

bool read_small_file(const std::string& path, std::string* out) {
  int fd = open_retry(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  UniqueFd guard(fd);
  char buf[128];
  ssize_t n;
  do n = ::read(fd, buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  out->assign(buf, size_t(n));
  return true;
}

}  // namespace ssd::cache
