// A fresh directory under /tmp for one test, removed with everything in it at the end (also after
// permission experiments: every directory is made writable again first).
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

namespace unittest {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "ssd_unit_test") {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    REQUIRE(p != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    // Undo permission experiments so the tree can be removed (also as a non-root user).
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
    ::chmod(path.c_str(), 0700);
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

}  // namespace unittest
