// Subcommands whose pipeline stage has not landed yet. They keep their place
// in the CLI so scripts get a clear answer instead of "unknown command".
#include <cstdio>
#include <string>

#include "tools/kiln/commands.h"

namespace kiln::cli {

int RunUnbuilt(int argc, char** argv) {
  const std::string name = argv[0];
  const bool help = argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
  std::fprintf(help ? stdout : stderr,
               "kiln %s: not built yet: this stage of kiln (see docs/architecture.md) has not landed.\n"
               "Available now: kiln inspect, kiln tokenize, kiln synth.\n",
               name.c_str());
  return help ? 0 : 3;
}

}  // namespace kiln::cli
