//===- KilnDialect.h - the kiln dialect ---------------------------*- C++ -*-===//
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/KilnEnums.h.inc"
#include "dialects/KilnDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/KilnAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/KilnTypes.h.inc"

#define GET_OP_CLASSES
#include "dialects/KilnOps.h.inc"
