//===- Passes.h - kiln passes ----------------------------------*- C++ -*-===//
#pragma once

#include "dialects/KilnDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

}  // namespace mlir::kiln
