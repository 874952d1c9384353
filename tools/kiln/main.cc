// kiln: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/kiln/commands.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

constexpr Command kCommands[] = {
#ifdef KILN_HAVE_COMPILER
    {"compile", "compile a model into an artifact: import, passes, IR dumps, GPU kernels", kiln::cli::RunCompile},
#else
    {"compile", "compile a model (this kiln was built without the compiler)", kiln::cli::RunCompileAbsent},
#endif
    {"run", "generate text with a model (CPU, CUDA or Vulkan)", kiln::cli::RunRun},
    {"serve", "serve a model over an OpenAI-compatible HTTP API", kiln::cli::RunServe},
    {"bench", "measure prefill and decode speed beside the roofline and the peers", kiln::cli::RunBench},
    {"perplexity", "measure a model's perplexity on a text, as llama.cpp's llama-perplexity does",
     kiln::cli::RunPerplexity},
    {"inspect", "print a model file's architecture, tokenizer and tensors", kiln::cli::RunInspect},
    {"tokenize", "print the token ids of a text", kiln::cli::RunTokenize},
    {"synth", "write a Llama-family GGUF with random weights", kiln::cli::RunSynth},
};

void PrintUsage(std::FILE* out) {
  std::fprintf(out, "usage: kiln COMMAND [args]   (kiln COMMAND --help for details)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("kiln %s\n", KILN_VERSION);
    return 0;
  }
#ifdef KILN_HAVE_COMPILER
  kiln::cli::SetInMemoryCompiler(kiln::cli::CompileToPlanJson);
  kiln::cli::SetInMemoryKernelCompiler(kiln::cli::CompileKernelsInMemory);
#endif
  for (const Command& c : kCommands) {
    if (std::string(argv[1]) == c.name) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kiln: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
