// `kiln compile` in the runtime-only build (KILN_BUILD_COMPILER=OFF): the
// command keeps its place so scripts get a clear answer, not "unknown command".
#include <cstdio>
#include <string>

#include "tools/kiln/commands.h"

namespace kiln::cli {

int RunCompileAbsent(int argc, char** argv) {
  const bool help = argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
  std::fprintf(help ? stdout : stderr,
               "kiln compile: this kiln was built without the compiler (KILN_BUILD_COMPILER=OFF, the runtime-only\n"
               "build): compile on a machine with the full build and run the .kiln artifact here.\n");
  return help ? 0 : 3;
}

}  // namespace kiln::cli
