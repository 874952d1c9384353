//===- KilnDialect.cpp - dialect, attributes and types --------------------===//

#include "dialects/KilnDialect.h"

#include "llvm/ADT/TypeSwitch.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace mlir::kiln;

#include "dialects/KilnDialect.cpp.inc"
#include "dialects/KilnEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/KilnAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/KilnTypes.cpp.inc"

void KilnDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/KilnAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/KilnTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/KilnOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// StorageAttr
//===----------------------------------------------------------------------===//

namespace {
// Block geometry of each storage kind: {elements, bytes} per block. int4 and
// int2 are group-wise: `group` elements share one f16 scale and zero point.
struct Geometry {
  int64_t elements;
  int64_t bytes;
};

Geometry GeometryOf(StorageKind kind, int64_t group) {
  switch (kind) {
    case StorageKind::f32: return {1, 4};
    case StorageKind::f16: return {1, 2};
    case StorageKind::bf16: return {1, 2};
    case StorageKind::q8_0: return {32, 34};
    case StorageKind::q4_0: return {32, 18};
    case StorageKind::q4_1: return {32, 20};
    case StorageKind::q5_0: return {32, 22};
    case StorageKind::q5_1: return {32, 24};
    case StorageKind::q2_k: return {256, 84};
    case StorageKind::q3_k: return {256, 110};
    case StorageKind::q4_k: return {256, 144};
    case StorageKind::q5_k: return {256, 176};
    case StorageKind::q6_k: return {256, 210};
    case StorageKind::int4: return {group, group / 2 + 4};
    case StorageKind::int2: return {group, group / 4 + 4};
  }
  return {1, 4};
}
}  // namespace

LogicalResult StorageAttr::verify(function_ref<InFlightDiagnostic()> emitError, StorageKind kind, int64_t group) {
  const bool grouped = kind == StorageKind::int4 || kind == StorageKind::int2;
  if (grouped && (group < 8 || group % 8 != 0)) {
    return emitError() << "storage " << stringifyStorageKind(kind)
                       << " needs a group size that is a positive multiple of 8, got " << group;
  }
  if (!grouped && group != 0) {
    return emitError() << "storage " << stringifyStorageKind(kind) << " takes no group size";
  }
  return success();
}

int64_t StorageAttr::blockElements() const { return GeometryOf(getKind(), getGroup()).elements; }

int64_t StorageAttr::bytesFor(int64_t n) const {
  const Geometry g = GeometryOf(getKind(), getGroup());
  return n / g.elements * g.bytes;
}

//===----------------------------------------------------------------------===//
// WeightType
//===----------------------------------------------------------------------===//

LogicalResult WeightType::verify(function_ref<InFlightDiagnostic()> emitError, ArrayRef<int64_t> shape,
                                 StorageAttr storage) {
  if (shape.empty() || shape.size() > 2) {
    return emitError() << "weight must be 1-D or 2-D, got " << shape.size() << " dimensions";
  }
  for (int64_t d : shape) {
    if (d <= 0) return emitError() << "weight dimensions must be positive, got " << d;
  }
  if (!storage) return emitError() << "weight needs a storage attribute";
  const int64_t block = storage.blockElements();
  if (shape.back() % block != 0) {
    return emitError() << "weight row length " << shape.back() << " is not a multiple of the "
                       << stringifyStorageKind(storage.getKind()) << " block of " << block << " elements";
  }
  return success();
}

int64_t WeightType::numElements() const {
  int64_t n = 1;
  for (int64_t d : getShape()) n *= d;
  return n;
}
