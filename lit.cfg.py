# lit configuration for the FileCheck tests beside the dialect and passes
# (dialects/test, passes/test). ctest runs lit with --param tools_dir=<build>/bin.
import os

import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["Inputs"]

tools_dir = lit_config.params.get("tools_dir")
llvm_bin = lit_config.params.get("llvm_bin", "/usr/lib/llvm-19/bin")
if not tools_dir:
    lit_config.fatal("run lit with --param tools_dir=<build>/bin (ctest does)")
tools_dir = os.path.abspath(tools_dir)
# Keep lit's scratch files out of the source tree.
config.test_exec_root = os.path.join(os.path.dirname(tools_dir), "lit-out")
config.environment["PATH"] = os.pathsep.join([tools_dir, llvm_bin, os.environ.get("PATH", "")])
