// Subcommands whose pipeline stage has not landed yet (and compile in a
// runtime-only build). They keep their place
// in the CLI so scripts get a clear answer instead of "unknown command".
#include <cstdio>
#include <string>

#include "tools/kiln/commands.h"

namespace kiln::cli {

int RunUnbuilt(int argc, char** argv) {
  const std::string name = argv[0];
  const bool help = argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
  if (name == "compile") {
    std::fprintf(help ? stdout : stderr,
                 "kiln compile: this kiln was built without the compiler (KILN_BUILD_COMPILER=OFF, the runtime-only\n"
                 "build): compile on a machine with the full build and run the .kiln artifact here.\n");
  } else {
    std::fprintf(help ? stdout : stderr,
                 "kiln %s: not built yet: this stage of kiln (see docs/architecture.md) has not landed.\n"
                 "Available now: kiln compile, run, inspect, tokenize, synth.\n",
                 name.c_str());
  }
  return help ? 0 : 3;
}

}  // namespace kiln::cli
