// The subcommands of the `kiln` binary. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code.
#pragma once

namespace kiln::cli {

int RunInspect(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunSynth(int argc, char** argv);
// compiler/CompileCommand.cpp; only in a kiln built with the compiler.
int RunCompile(int argc, char** argv);
// compile, run, serve, bench: present in the CLI, not built yet.
int RunUnbuilt(int argc, char** argv);

}  // namespace kiln::cli
