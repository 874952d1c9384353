// Feeds arbitrary bytes to the JSON parser and checks the writer against it:
// whatever parses must write out (compact and pretty) as JSON that parses
// back to an equal value and writes out identically again. The same bytes
// also go through the config.json reader, which consumes parsed JSON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/formats/hf_config.h"
#include "runtime/util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)kiln::ParseHfConfig(text, "fuzz/config.json");
  absl::StatusOr<kiln::JsonValue> value = kiln::ParseJson(text);
  if (!value.ok()) return 0;
  for (bool pretty : {false, true}) {
    const std::string written = kiln::ToJson(*value, pretty);
    absl::StatusOr<kiln::JsonValue> reread = kiln::ParseJson(written);
    if (!reread.ok() || !(*reread == *value)) __builtin_trap();
    if (kiln::ToJson(*reread, pretty) != written) __builtin_trap();
  }
  return 0;
}
