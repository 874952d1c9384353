#include "codegen/template_dir.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kiln::codegen {

std::optional<std::string> TemplateFromDir(std::string_view language, std::string_view file) {
  const char* dir = std::getenv("KILN_KERNEL_TEMPLATES");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  const std::string path = absl::StrCat(dir, "/", std::string(language), "/", std::string(file));
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  static std::mutex mu;
  static std::set<std::string> told;
  std::lock_guard<std::mutex> lock(mu);
  if (told.insert(path).second) std::fprintf(stderr, "kiln: kernel template %s (KILN_KERNEL_TEMPLATES)\n", path.c_str());
  return text.str();
}

}  // namespace kiln::codegen
